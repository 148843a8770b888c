"""JSON ext headers of NSQ records -> unified-schema columns, column by column.

A chunk whose headers are all compact objects of string and integer values (what clients
write) is read without Python objects, by :func:`scan_headers` (:mod:`msglake.formats.nsq_json`).
Any other chunk is parsed per record (orjson; :func:`load_headers` maps the parser over the
chunk), and every (key, value) pair is then flattened once, with C-level iterators, into one
key list and one value list. Either way the ``headers`` and ``properties`` maps and every
column are cut from the pairs with NumPy and Arrow kernels. Per-value Python runs only for
the values whose JSON type needs the exact rules (a float or a string in an integer column,
a list in ``keys``, a compression code, a float or nested value as text).
"""
from __future__ import annotations

import json
from itertools import chain, compress, count, repeat
from operator import methodcaller

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from msglake.formats import native as NV
from msglake.formats.nsq_json import Pairs, scan
from msglake.schemas.messages import TS

TRACE_KEY = "##trace_id"
TAG_KEY = "##client_dispatch_tag"
COMPRESS_KEY = "nsq.client.compress"
COMPRESSION_CODECS = {"1": "gzip", "2": "snappy", "3": "lz4"}  # go-nsq compress.go

_TS_HEADERS = ("bornTimestamp", "startDeliverTime", "expireTime")
_STR_HEADERS = ("bornHost", "searchKey", "transactionId", "correlationId")
#: OpenMessaging header names that become columns (so they stay out of ``properties``).
COLUMN_HEADERS = frozenset(
    _TS_HEADERS + _STR_HEADERS + ("priority", "durability", "delayTime", "traceId", "messageKey", "shardingKey", "keys")
)
#: Client/broker keys that are not user properties (they still appear in ``headers``).
RESERVED_PREFIXES = ("##", "nsq.")

_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the largest Spark timestamp
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class HeaderError(ValueError):
    """The ext header of a record cannot be accepted; the record is quarantined."""


def load_header(raw: bytes) -> dict:
    """Parse one header; the broker would have refused what this refuses.

    Raises
    ------
    HeaderError
        When the bytes are not a JSON object, or ``##trace_id`` is not a decimal uint64
        string (nsqd answers ``INVALID_TRACE_ID``).

    Examples
    --------
    >>> load_header(b'{"##trace_id":"7"}')
    {'##trace_id': '7'}
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise HeaderError(f"ext header is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise HeaderError(f"ext header is JSON but not an object ({type(doc).__name__})")
    trace = doc.get(TRACE_KEY)
    if trace is not None and (
        not isinstance(trace, str) or not (trace.isascii() and trace.isdigit()) or int(trace) > _INT64[1] * 2 + 1
    ):
        raise HeaderError(f"{TRACE_KEY} must be a decimal uint64 string, got {trace!r}")
    return doc


#: JSON types of header values, as :func:`_type_codes` numbers them (orjson gives no others
#: apart from lists, objects and floats, which are all ``_OTHER``).
_STR, _INT, _BOOL, _NULL, _OTHER = range(5)
_TYPE_CODES = {str: _STR, int: _INT, bool: _BOOL, type(None): _NULL}
_trace_of = methodcaller("get", TRACE_KEY)


def load_headers(raws: list[bytes]) -> tuple[list[dict], list[int], dict[int, str]]:
    """Parse the headers of a chunk: (accepted headers, their indices in ``raws``, reason per refused index).

    The verdicts and reasons are those of :func:`load_header` on each header. The parser is
    mapped over all headers in one call and the ``##trace_id`` rule checked with Arrow
    kernels; a chunk with a header that is not a JSON object, or trace ids that are not all
    strings, goes through :func:`load_header` header by header instead.

    Examples
    --------
    >>> docs, where, bad = load_headers([b'{"a":1}', b'[1]', b'{"##trace_id":"x"}'])
    >>> docs, where, bad
    ([{'a': 1}], [0], {1: 'ext header is JSON but not an object (list)', 2: "##trace_id must be a decimal uint64 string, got 'x'"})
    """
    try:
        docs = list(map(orjson.loads, raws))
    except orjson.JSONDecodeError:
        return _load_each(raws)
    if set(map(type, docs)) - {dict}:
        return _load_each(raws)
    traces = list(map(_trace_of, docs))
    try:
        arr = pa.array(traces)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # not all strings (or null)
        return _load_each(raws)
    if arr.type == pa.null() or arr.null_count == len(arr):
        return docs, list(range(len(docs))), {}
    if arr.type != pa.string():
        return _load_each(raws)
    ok = pc.fill_null(pc.match_substring_regex(arr, "^[0-9]+$"), True).to_numpy(zero_copy_only=False)
    long = pc.fill_null(pc.greater(pc.binary_length(arr), 19), False).to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(ok & long).tolist():  # 20+ digits: may be past uint64
        ok[i] = int(traces[i]) <= _INT64[1] * 2 + 1
    if ok.all():
        return docs, list(range(len(docs))), {}
    bad = {i: f"{TRACE_KEY} must be a decimal uint64 string, got {traces[i]!r}" for i in np.flatnonzero(~ok).tolist()}
    where = np.flatnonzero(ok).tolist()
    return [docs[i] for i in where], where, bad


def scan_headers(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, scanner=None
                 ) -> tuple[Pairs, list[int], dict[int, str]] | None:
    """:func:`load_headers` for the headers ``buf[starts[i]:ends[i]]`` read by :func:`msglake.formats.nsq_json.scan`
    (or ``scanner``, a function that gives the same pairs).

    None when the chunk's headers are not all simple (or a ``##trace_id`` is an integer):
    parse them with :func:`load_headers`.
    """
    pairs = (scanner or scan)(buf, starts, ends)
    if pairs is None:
        return None
    k = len(pairs.counts)
    if TRACE_KEY not in pairs.names:
        return pairs, list(range(k)), {}
    at = np.flatnonzero(pairs.code == pairs.names.index(TRACE_KEY))
    if pairs.is_int[at].any():
        return None
    traces = pairs.texts.take(pa.array(at))
    ok = pc.match_substring_regex(traces, "^[0-9]+$").to_numpy(zero_copy_only=False)
    long = pc.greater(pc.binary_length(traces), 19).to_numpy(zero_copy_only=False)
    for j in np.flatnonzero(ok & long).tolist():  # 20+ digits: may be past uint64
        ok[j] = int(traces[j].as_py()) <= _INT64[1] * 2 + 1
    if ok.all():
        return pairs, list(range(k)), {}
    header_of = np.repeat(np.arange(k), pairs.counts)[at]
    bad = {int(h): f"{TRACE_KEY} must be a decimal uint64 string, got {traces[j].as_py()!r}"
           for j, h in zip(np.flatnonzero(~ok).tolist(), header_of[~ok])}
    accepted = [i for i in range(k) if i not in bad]
    return pairs.only(np.asarray(accepted, np.int64)), accepted, bad


def _load_each(raws: list[bytes]) -> tuple[list[dict], list[int], dict[int, str]]:
    docs, where, bad = [], [], {}
    for i, raw in enumerate(raws):
        try:
            docs.append(load_header(raw))
            where.append(i)
        except HeaderError as e:
            bad[i] = str(e)
    return docs, where, bad


def as_text(v) -> str:
    """A header value as text: strings as they are, anything else as compact JSON."""
    if isinstance(v, str):
        return v
    try:
        return orjson.dumps(v).decode()
    except TypeError:  # integers past 64 bits: orjson reads them, but will not write them
        return json.dumps(v, separators=(",", ":"))


def _as_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _as_keys(v) -> list[str] | None:
    if isinstance(v, str):
        return [k for k in v.split(" ") if k]
    if isinstance(v, list):
        return [as_text(k) for k in v]
    return None


def _type_codes(values: list) -> np.ndarray:
    """The JSON type (``_STR`` ... ``_OTHER``) of each value."""
    return np.fromiter(map(_TYPE_CODES.get, map(type, values), repeat(_OTHER)), np.int8, len(values))


def _pick(values: list, idx: np.ndarray) -> list:
    return list(map(values.__getitem__, idx.tolist()))


def _strings(values: list) -> pa.Array:
    # Without a type, pa.array converts a list of str several times faster than with one.
    arr = pa.array(values) if values else pa.array([], pa.string())
    return arr if arr.type == pa.string() else arr.cast(pa.string())


def _texts(values: list, types: np.ndarray) -> pa.Array:
    """Every value as :func:`as_text` writes it: strings as they are, others as compact JSON."""
    is_str = types == _STR
    if is_str.all():
        return _strings(values)
    # Strings in one pass over all values; the other types (a few per header) grouped after.
    parts = [_strings(list(compress(values, is_str.tolist())))]
    at = np.flatnonzero(~is_str)
    others, other_types = _pick(values, at), types[at]
    for code in (_INT, _BOOL, _NULL, _OTHER):
        group = list(compress(others, (other_types == code).tolist()))
        if code == _INT:
            try:  # an integer's JSON is its decimal digits, as Arrow's cast writes them
                parts.append(pa.array(group, pa.int64()).cast(pa.string()))
            except (OverflowError, pa.ArrowInvalid):  # past int64
                parts.append(pa.array(list(map(str, group)), pa.string()))
        elif code == _BOOL:
            parts.append(pa.array(group, pa.bool_()).cast(pa.string()))  # "true" / "false"
        elif code == _NULL:
            parts.append(pa.array(["null"] * len(group), pa.string()))
        else:
            parts.append(pa.array([as_text(v) for v in group], pa.string()))
    order = np.argsort(types, kind="stable")  # where each value sits in the concatenated groups
    back = np.empty(len(order), np.int64)
    back[order] = np.arange(len(order))
    return pa.concat_arrays(parts).take(pa.array(back))


class _Flat:
    """Every (key, value) pair of a chunk's headers, in header order, and where each key is.

    Columns have ``n`` rows, header ``i`` on row ``rows[i]`` (by default one row per header).
    """

    def __init__(self, docs: list[dict] | Pairs, rows: np.ndarray | None = None, n: int | None = None):
        pairs = docs if isinstance(docs, Pairs) else None
        counts = pairs.counts if pairs is not None else np.fromiter(map(len, docs), np.int64, len(docs))
        self.n = len(counts) if n is None else n
        if rows is None:
            self.counts = counts
        else:
            self.counts = np.zeros(self.n, np.int64)
            self.counts[rows] = counts
        if pairs is not None:  # read by formats.nsq_json: strings and integers only
            self.names, self.code, self.texts = pairs.names, pairs.code, pairs.texts
            self.types = np.where(pairs.is_int, _INT, _STR).astype(np.int8)
            self._pairs = pairs
        else:
            keys = list(chain.from_iterable(docs))
            self.values = list(chain.from_iterable(map(dict.values, docs)))
            # Distinct keys: setdefault leaves each key at the index of its first occurrence.
            first: dict[str, int] = {}
            at_first = np.fromiter(map(first.setdefault, keys, count()), np.int64, len(keys))
            self.names = list(first)
            self.code = np.searchsorted(np.fromiter(first.values(), np.int64, len(first)), at_first)
            self.types = _type_codes(self.values)
            self.texts = _texts(self.values, self.types)
        self.code_of = {k: i for i, k in enumerate(self.names)}
        self.row = np.repeat(np.arange(self.n), self.counts)  # of each pair
        self.keys = pa.array(self.names, pa.string()).take(pa.array(self.code))

    def __getattr__(self, name: str):
        if name == "values":  # headers read by formats.nsq_json: Python values only when a rule needs them
            self.values = self._pairs.values()
            return self.values
        raise AttributeError(name)

    def entries(self, key: str) -> np.ndarray:
        """Indices of the pairs whose key is ``key`` (at most one per header)."""
        code = self.code_of.get(key)
        return np.zeros(0, np.int64) if code is None else np.flatnonzero(self.code == code)

    def spread(self, arr: pa.Array, at: np.ndarray, src: np.ndarray | None = None) -> pa.Array:
        """``arr[src]`` (one value per pair in ``at``; all of ``arr`` by default) over all headers,
        null where the key is absent."""
        idx = np.zeros(self.n, np.int64)
        idx[self.row[at]] = np.arange(len(at)) if src is None else src
        missing = np.ones(self.n, np.bool_)
        missing[self.row[at]] = False
        return arr.take(pa.array(idx, mask=missing))

    def text(self, key: str) -> pa.Array:
        """Column of ``key`` as text (:func:`as_text`); null where absent or JSON null."""
        at = self.entries(key)
        at = at[self.types[at] != _NULL]
        return self.spread(self.texts, at, at) if len(at) else pa.nulls(self.n, pa.string())

    def integer(self, key: str, lo: int, hi: int) -> pa.Array:
        """int64 column of ``key``: integers and integral strings or floats within ``[lo, hi]``; else null."""
        at = self.entries(key)
        if len(at) == 0:
            return pa.nulls(self.n, pa.int64())
        arr = None
        if np.isin(self.types[at], (_INT, _NULL)).all():
            if "_pairs" in self.__dict__:  # integers of at most 18 digits, as written
                arr = self.texts.take(pa.array(at)).cast(pa.int64())
            else:
                try:
                    arr = pa.array(_pick(self.values, at), pa.int64())
                except (OverflowError, pa.ArrowInvalid):  # past int64: out of range anyway
                    pass
        if arr is None:
            exact = [_as_int(v) for v in _pick(self.values, at)]
            arr = pa.array([i if i is not None and lo <= i <= hi else None for i in exact], pa.int64())
        out_of_range = pc.or_(pc.less(arr, lo), pc.greater(arr, hi))
        return self.spread(pc.if_else(out_of_range, pa.scalar(None, pa.int64()), arr), np.asarray(at))

    def keys_column(self, key: str) -> pa.Array:
        """``keys``: a string split on spaces (empty pieces left out), a list as text; else null."""
        at = self.entries(key)
        typ = pa.list_(pa.string())
        if len(at) == 0:
            return pa.nulls(self.n, typ)
        if not (self.types[at] == _STR).all():
            return self.spread(pa.array([_as_keys(v) for v in _pick(self.values, at)], typ), at)
        pieces = pc.split_pattern(self.texts.take(pa.array(at)), " ")
        flat = pc.list_flatten(pieces)
        keep = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
        counts = np.bincount(pc.list_parent_indices(pieces).to_numpy()[keep], minlength=len(at))
        offsets = np.zeros(len(at) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        return self.spread(pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep))), at)

    def mapped(self, key: str, fn, typ: pa.DataType) -> pa.Array:
        """``fn`` of each present value (Python, for keys that are rare or need exact rules)."""
        at = self.entries(key)
        if len(at) == 0:
            return pa.nulls(self.n, typ)
        return self.spread(pa.array([fn(v) for v in _pick(self.values, at)], typ), at)


def _compression(c) -> str | None:
    return None if c is None else COMPRESSION_CODECS.get(as_text(c), f"unknown:{as_text(c)}")


def header_columns(docs: list[dict] | Pairs, rows: np.ndarray | None = None, n: int | None = None, core=None
                   ) -> dict[str, pa.Array]:
    """Columns of the unified schema from parsed headers (or :func:`scan_headers` pairs), one row per header.

    With ``rows`` and ``n``, the columns have ``n`` rows and header ``i`` is on row
    ``rows[i]`` (increasing); the other rows are null, with empty maps.

    ``traceId`` is the header ``traceId``, else ``##trace_id``; ``messageKey`` is
    ``messageKey``, else ``shardingKey``; ``tags`` is ``##client_dispatch_tag``. Values of the
    wrong type leave the column null; the value itself is still in ``headers``. With the native
    ``core``, pairs (not parsed headers) are turned into columns there, by the same rules.

    Examples
    --------
    >>> cols = header_columns([{"##trace_id": "7", "priority": 9, "app": "x"}, {}])
    >>> cols["traceId"].to_pylist(), cols["priority"].to_pylist(), cols["properties"].to_pylist()
    (['7', None], [9, None], [[('app', 'x')], []])
    """
    if core is not None and isinstance(docs, Pairs):
        return _native_columns(core, docs, rows, n)
    f = _Flat(docs, rows, n)
    col = {}
    for key in _TS_HEADERS:
        col[key] = pc.multiply(f.integer(key, 0, _MAX_MS), 1000).cast(TS)
    for key in _STR_HEADERS:
        col[key] = f.text(key)
    col["priority"] = f.integer("priority", *_INT32).cast(pa.int32())
    col["durability"] = f.integer("durability", *_INT32).cast(pa.int32())
    col["delayTime"] = f.integer("delayTime", *_INT64)
    col["traceId"] = pc.coalesce(f.text("traceId"), f.text(TRACE_KEY))
    col["messageKey"] = pc.coalesce(f.text("messageKey"), f.text("shardingKey"))
    col["tags"] = f.text(TAG_KEY)
    col["keys"] = f.keys_column("keys")
    col["compression"] = f.mapped(COMPRESS_KEY, _compression, pa.string())

    col["headers"] = _maps(f.counts, f.keys, f.texts)
    reserved = np.array([not is_user_property(k) for k in f.names], np.bool_)
    is_property = ~reserved[f.code] if len(f.names) else np.zeros(0, np.bool_)
    prop_counts = np.bincount(f.row[is_property], minlength=f.n)
    keep = pa.array(is_property)
    col["properties"] = _maps(prop_counts, f.keys.filter(keep), f.texts.filter(keep))
    return col


def is_user_property(key: str) -> bool:
    """A header that is a user property: not a column, not a client or broker key."""
    return not (key in COLUMN_HEADERS or key.startswith(RESERVED_PREFIXES))


def _native_columns(core, pairs: Pairs, rows: np.ndarray | None, n: int | None) -> dict[str, pa.Array]:
    """:func:`header_columns` of pairs by the native core (``msglake_native.nsq_header_columns``)."""
    k = len(pairs.counts)
    rows = np.arange(k, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    texts = pairs.texts
    offsets = np.frombuffer(texts.buffers()[1], np.int32)[texts.offset : texts.offset + len(texts) + 1]
    data = np.frombuffer(texts.buffers()[2] or b"", np.uint8)
    counts, code = np.ascontiguousarray(pairs.counts, np.int64), np.ascontiguousarray(pairs.code, np.int64)
    is_int = np.ascontiguousarray(pairs.is_int, np.bool_).view(np.uint8)
    batch = core.nsq_header_columns(pairs.names, [is_user_property(key) for key in pairs.names], counts, code,
                                    is_int, offsets.view(np.uint8), data, rows, k if n is None else n)
    return NV.columns(NV.arrow(batch))


def _maps(counts: np.ndarray, keys: pa.Array, values: pa.Array) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)

