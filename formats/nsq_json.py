"""A vectorised reader for the JSON headers producers usually write, for a whole chunk at once.

go-nsq clients write a header as a compact JSON object of string and integer values (a Go
map, keys sorted). Such headers are read here with NumPy over the chunk's header bytes, with
no Python object per value: quotes pair up, the bytes outside strings must follow the
grammar ``{"k":v,...}`` (``v`` a string or an integer), checked through each token's
neighbours. Anything else in a chunk (whitespace, escapes, non-ASCII bytes, floats, true,
false, null, nesting, duplicate keys, integers past 18 digits) makes :func:`scan` return
None and the chunk is parsed by orjson instead, so this path only ever accepts headers that
orjson reads to the same values.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from msglake.formats.base import binary_array, gather_slices

_TEXT, _OPEN, _CLOSE, _COLON, _COMMA, _QUOTE, _DIGIT, _MINUS, _BAD = range(9)
_CLASS = np.full(256, _BAD, np.int8)
_CLASS[0x20:0x7F] = _TEXT  # printable ASCII; outside strings only the classes below may appear
for _ch, _cls in (("{", _OPEN), ("}", _CLOSE), (":", _COLON), (",", _COMMA), ('"', _QUOTE), ("-", _MINUS)):
    _CLASS[ord(_ch)] = _cls
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[ord("\\")] = _BAD  # escapes: left to orjson

#: Longest integer read here (int64 holds any 18-digit number).
MAX_DIGITS = 18


class Pairs:
    """Every (key, value) pair of ``k`` headers, in header order.

    ``counts`` pairs per header; ``code`` of each pair's key in ``names``; ``is_int`` whether
    the value is an integer (else a string); ``texts`` the value as text (an integer's digits
    as written, which is how :func:`msglake.formats.nsq_headers.as_text` writes it).
    """

    def __init__(self, counts: np.ndarray, names: list[str], code: np.ndarray, is_int: np.ndarray, texts: pa.Array):
        self.counts, self.names, self.code, self.is_int, self.texts = counts, names, code, is_int, texts

    def values(self) -> list:
        """The values as orjson gives them (str or int)."""
        return [int(t) if i else t for t, i in zip(self.texts.to_pylist(), self.is_int.tolist())]

    def only(self, headers: np.ndarray) -> "Pairs":
        """The pairs of some headers (indices, increasing)."""
        header_of = np.repeat(np.arange(len(self.counts)), self.counts)
        keep = np.zeros(len(self.counts), np.bool_)
        keep[headers] = True
        mask = keep[header_of]
        return Pairs(self.counts[headers], self.names, self.code[mask], self.is_int[mask],
                     self.texts.filter(pa.array(mask)))


def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Pairs | None:
    """The pairs of the headers ``buf[starts[i]:ends[i]]``, or None unless all are simple (see module)."""
    k = len(starts)
    if k == 0 or ((ends - starts) < 2).any():
        return None
    off, data = gather_slices(buf, starts, ends)
    off = off.astype(np.int64)
    cls = _CLASS[data]
    if (cls == _BAD).any():
        return None
    quotes = np.flatnonzero(cls == _QUOTE)
    if len(quotes) % 2:
        return None
    opens, closes = quotes[0::2], quotes[1::2]
    # Inside a string: from its opening quote to the byte before its closing one.
    edges = np.empty(len(quotes) + 2, np.int64)
    edges[0], edges[1:-1], edges[-1] = 0, quotes, len(data)
    runs = np.diff(edges)
    inside = np.repeat(np.arange(len(runs)) % 2 == 1, runs)
    outside = ~inside
    if (cls[outside] == _TEXT).any():
        return None
    first, last = off[:-1], off[1:] - 1
    if not ((data[first] == ord("{")) & (data[last] == ord("}")) & outside[first] & outside[last]).all():
        return None  # also: a string runs across headers
    if np.count_nonzero(outside & (cls == _OPEN)) != k or np.count_nonzero(outside & (cls == _CLOSE)) != k:
        return None

    def at(pos: np.ndarray) -> np.ndarray:
        return cls[pos]

    # Strings: a key follows '{' or ',' and is followed by ':'; a value follows ':' and is followed by ',' or '}'.
    before, after = at(opens - 1), at(closes + 1)
    is_key = (before == _OPEN) | (before == _COMMA)
    is_value = before == _COLON
    if not ((is_key & (after == _COLON)) | (is_value & ((after == _COMMA) | (after == _CLOSE)))).all():
        return None
    # Numbers: runs of digits (and a leading '-') outside strings, after ':' and before ',' or '}'.
    num = np.flatnonzero(outside & ((cls == _DIGIT) | (cls == _MINUS)))
    breaks = np.flatnonzero(np.diff(num) != 1) + 1
    run_a = num[np.r_[0, breaks]] if len(num) else num
    run_b = num[np.r_[breaks - 1, len(num) - 1]] + 1 if len(num) else num
    if len(num):
        after_num = at(run_b)
        if not ((at(run_a - 1) == _COLON) & ((after_num == _COMMA) | (after_num == _CLOSE))).all():
            return None
        neg = at(run_a) == _MINUS
        if np.count_nonzero(cls[num] == _MINUS) != np.count_nonzero(neg):
            return None  # a '-' inside a number
        digits_at = run_a + neg
        n_digits = run_b - digits_at
        if (n_digits < 1).any() or (n_digits > MAX_DIGITS).any():
            return None
        if ((data[digits_at] == ord("0")) & ((n_digits > 1) | neg)).any():
            return None  # leading zeros, -0
    # Punctuation: ':' after a key, before a value; ',' after a value, before a key; '{' '}' at the ends.
    colons = np.flatnonzero(outside & (cls == _COLON))
    nxt = at(colons + 1)
    if not ((at(colons - 1) == _QUOTE) & ((nxt == _QUOTE) | (nxt == _DIGIT) | (nxt == _MINUS))).all():
        return None
    commas = np.flatnonzero(outside & (cls == _COMMA))
    prv = at(commas - 1)
    if not (((prv == _QUOTE) | (prv == _DIGIT)) & (at(commas + 1) == _QUOTE)).all():
        return None
    after_open, before_close = at(first + 1), at(last - 1)
    if not (((after_open == _QUOTE) | (after_open == _CLOSE)) & (
            (before_close == _QUOTE) | (before_close == _DIGIT) | (before_close == _OPEN))).all():
        return None

    key_a, key_b = opens[is_key] + 1, closes[is_key]
    value_a = np.concatenate([opens[is_value] + 1, run_a])
    value_b = np.concatenate([closes[is_value], run_b])
    is_int = np.concatenate([np.zeros(np.count_nonzero(is_value), np.bool_), np.ones(len(run_a), np.bool_)])
    if len(value_a) != len(key_a) or len(colons) != len(key_a):
        return None
    order = np.argsort(value_a, kind="stable")
    value_a, value_b, is_int = value_a[order], value_b[order], is_int[order]
    header = np.searchsorted(off, key_a, side="right") - 1
    keys = binary_array(*gather_slices(data, key_a, key_b), pa.string()).dictionary_encode()
    code = keys.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = keys.dictionary.to_pylist()
    if len(code) and np.bincount(header * len(names) + code).max() > 1:
        return None  # a key twice in one header: orjson keeps its first place and last value
    texts = binary_array(*gather_slices(data, value_a, value_b), pa.string())
    return Pairs(np.bincount(header, minlength=k), names, code, is_int, texts)
