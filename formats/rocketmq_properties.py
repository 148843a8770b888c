"""RocketMQ property strings -> Arrow columns, for a whole batch at once.

The same rules as :func:`msglake.formats.rocketmq_layout.string_to_properties` (the broker's
``string2messageProperties``), applied with Arrow string kernels to every record of a
batch: split on 0x02, split each piece at its first 0x01, drop pieces with no 0x01, with an
empty name or value, and the ``__CRC32#`` trailer, keep the last of duplicate names. A piece
without a 0x01 is dropped and its record kept, as the broker's parser does (spec §3.1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msglake.formats.rocketmq_layout import CRC32_KEY, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, RESERVED_KEYS

#: Names whose first value in a record is kept too: the broker appends a batch send's own
#: properties after each message's, so the message's UNIQ_KEY is the first and the batch's the last.
FIRST_OF = ("UNIQ_KEY",)


@dataclass
class Properties:
    """Parsed properties of ``n`` records."""

    n: int
    rows: np.ndarray  # record of each kept entry (non-decreasing)
    keys: pa.Array  # kept entries, in record order
    values: pa.Array
    codes: np.ndarray  # of each kept key in ``names``
    names: dict[str, int]  # distinct key -> code

    #: Name -> its first value in each record, for the names of :data:`FIRST_OF` (null where absent).
    firsts: dict[str, pa.Array] = field(default_factory=dict)
    #: Columns already taken by :meth:`get` (the decoder asks for some names twice).
    taken: dict[str, pa.Array] = field(default_factory=dict, repr=False, compare=False)

    def first(self, name: str) -> pa.Array:
        """The first value of ``name`` in each record (:meth:`get` gives the last, as the broker keeps)."""
        return self.firsts.get(name, pa.nulls(self.n, pa.string()))

    def get(self, name: str) -> pa.Array:
        """The value of property ``name`` for every record (null where absent)."""
        got = self.taken.get(name)
        if got is not None:
            return got
        code = self.names.get(name)
        if code is None:
            got = pa.nulls(self.n, pa.string())
        else:
            # One take straight from the entries (a name appears at most once per record).
            at = np.flatnonzero(self.codes == code)
            idx = np.zeros(self.n, np.int64)
            idx[self.rows[at]] = at
            missing = np.ones(self.n, np.bool_)
            missing[self.rows[at]] = False
            got = self.values.take(pa.array(idx, mask=missing))
        self.taken[name] = got
        return got

    def maps(self) -> tuple[pa.MapArray, pa.MapArray]:
        """(``headers``: every property, ``properties``: the user ones) as map columns."""
        reserved = np.array([k in RESERVED_KEYS for k in self.names], np.bool_)
        user = ~reserved[self.codes] if len(reserved) else np.ones(0, np.bool_)
        return self._map(np.ones(len(self.rows), np.bool_)), self._map(user)

    def _map(self, keep: np.ndarray) -> pa.MapArray:
        counts = np.bincount(self.rows[keep], minlength=self.n)
        offsets = np.zeros(self.n + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        return pa.MapArray.from_arrays(pa.array(offsets), self.keys.filter(keep), self.values.filter(keep))


def parse(texts: pa.Array) -> Properties:
    """Parse a string array of property strings (one per record; null counts as empty).

    Examples
    --------
    >>> p = parse(pa.array(["a\\x011\\x02b\\x01x\\x02a\\x012\\x02", "TAGS\\x01t\\x02k\\x01\\x02", "oops"]))
    >>> p.get("a").to_pylist(), p.get("TAGS").to_pylist(), [m.as_py() for m in p.maps()[0]][2]
    (['2', None, None], [None, 't', None], [])
    >>> [m.as_py() for m in p.maps()[1]]
    [[('b', 'x'), ('a', '2')], [], []]
    >>> parse(pa.array(["UNIQ_KEY\x01own\x02UNIQ_KEY\x01batch\x02", "x\x011"])).first("UNIQ_KEY").to_pylist()
    ['own', None]
    """
    n = len(texts)
    pieces = pc.split_pattern(pc.fill_null(texts, ""), PROPERTY_SEPARATOR)
    rows = pc.list_parent_indices(pieces).to_numpy()
    flat = pc.list_flatten(pieces)
    kv = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
    parts = pc.list_value_length(kv).to_numpy()

    starts = kv.offsets.to_numpy()[:-1] - kv.offsets[0].as_py()
    inner = kv.values.slice(kv.offsets[0].as_py())
    keys = inner.take(pa.array(starts))
    has_value = parts == 2
    values = inner.take(pa.array(np.where(has_value, starts + 1, 0), mask=~has_value))
    keep = (
        has_value
        & (pc.binary_length(keys).to_numpy() > 0)
        & (pc.fill_null(pc.binary_length(values), 0).to_numpy() > 0)
        & ~pc.equal(keys, CRC32_KEY).to_numpy(zero_copy_only=False)
    )
    # A duplicate name keeps the last value: drop every earlier (record, name) occurrence.
    encoded = keys.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = {k: i for i, k in enumerate(encoded.dictionary.to_pylist())}
    firsts = {name: _first_values(n, rows, values, keep & (codes == names[name])) for name in FIRST_OF if name in names}
    pair = rows * (len(encoded.dictionary) + 1) + codes
    # Imported here, on the Python path only: pandas costs every Spark Python process that
    # imports the source (workers, the streaming planner) 0.13 s, and the native path never needs it.
    import pandas as pd

    earlier_dup = np.zeros(len(rows), np.bool_)
    earlier_dup[keep] = pd.Series(pair[keep]).duplicated(keep="last").to_numpy()
    keep &= ~earlier_dup
    return Properties(n, rows[keep], keys.filter(keep), values.filter(keep), codes[keep], names, firsts)


def _first_values(n: int, rows: np.ndarray, values: pa.Array, entries: np.ndarray) -> pa.Array:
    """Per record, the value of the first of ``entries`` in it (rows are non-decreasing)."""
    at = np.flatnonzero(entries)
    first = at[np.r_[True, rows[at][1:] != rows[at][:-1]]] if len(at) else at
    idx = np.zeros(n, np.int64)
    idx[rows[first]] = first
    missing = np.ones(n, np.bool_)
    missing[rows[first]] = False
    return values.take(pa.array(idx, mask=missing))
