"""What every segment codec shares: segment descriptions, decode results, Arrow helpers."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from msglake.schemas.source import SOURCE_SCHEMA

#: Largest piece of unreadable bytes put in one quarantine row; longer runs are split
#: into consecutive rows so no single row (or Parquet page) grows without bound.
MAX_QUARANTINE_CHUNK = 1 << 20


@dataclass(frozen=True)
class SegmentInfo:
    """One segment file as the driver found it; plain data, shipped to Spark tasks.

    Parameters
    ----------
    path : str
        Path relative to the source root (also the key of the streaming offsets).
    segment : str
        File name.
    topic, partition
        Parsed from the names; ``None`` when they did not parse.
    committed_end : int
        Bytes of the file that the broker declared written; reading stops there.
    sealed : bool
        True when no more bytes will be appended: an incomplete record before
        ``committed_end`` is corrupt, not pending.
    start_virtual : int or None
        Queue (virtual) offset of byte 0 of the file, when the meta files give it.
    file_size : int
        Size on disk when scanned.
    problem : str or None
        Why every record of this file must be quarantined (bad names), or None.
    whole_file : bool
        The file has no record framing to use (its name did not parse): quarantine it as
        raw chunks.
    """

    path: str
    segment: str
    topic: str | None
    partition: int | None
    committed_end: int
    sealed: bool
    start_virtual: int | None
    file_size: int
    file_num: int = -1
    problem: str | None = None
    whole_file: bool = False

    def to_dict(self) -> dict:
        # Its fields are plain values: a copy of them, not dataclasses.asdict's deep walk (42 µs
        # a segment, 0.42 s to plan a batch of 10,000 segments).
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> "SegmentInfo":
        return cls(**d)


@dataclass
class ScanResult:
    """Everything a codec found under a source root."""

    segments: list[SegmentInfo] = field(default_factory=list)
    #: Files that are not segments and are not read (meta files are not listed here), with why.
    ignored: dict[str, str] = field(default_factory=dict)
    #: Their bytes: on disk under the root but not segment bytes, so apart from the accounting.
    ignored_bytes: int = 0
    #: Remarks on the scan a user should see (missing meta files, ...).
    notes: list[str] = field(default_factory=list)

    def ignore(self, rel: str, why: str, size: int) -> None:
        self.ignored[rel] = why
        self.ignored_bytes += size

    def ignore_tree(self, folder: str, rel: str, why: str) -> None:
        """Every file under ``folder`` (``rel`` relative to the root), none of which is read."""
        for dirpath, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    size = os.stat(path).st_size
                except OSError:
                    size = 0
                self.ignore(rel + "/" + os.path.relpath(path, folder), why, size)


@dataclass
class DecodeResult:
    """Output of decoding one byte range of a segment."""

    batch: pa.RecordBatch  # SOURCE_SCHEMA rows, messages and quarantined records
    next_position: int  # where the next read of this segment starts
    decoded_bytes: int = 0
    quarantined_bytes: int = 0
    #: Bytes that hold no record by design (RocketMQ's end-of-file blank): counted, not stored.
    padding_bytes: int = 0


class SegmentCodec(Protocol):
    """A broker format, as the Spark data source sees it."""

    #: Name users give in ``format=`` (``nsq-ext``).
    name: str
    #: Value of the ``sourceFormat`` column (``nsq_ext``).
    source_format: str

    def scan(self, root: str) -> ScanResult: ...

    def decode(self, root: str, seg: SegmentInfo, start: int, end: int) -> Iterator[DecodeResult]: ...

    def split_points(self, root: str, seg: SegmentInfo, start: int, end: int, target: int) -> list[int]: ...

    def advance(
        self, root: str, seg: SegmentInfo, start: int, end: int, max_bytes: int | None, max_records: int | None
    ) -> tuple[int, int]: ...


# --------------------------------------------------------------------------- Arrow helpers


def gather_slices(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``buf[starts[i]:ends[i]]`` for all i without a Python loop.

    The slices must be in order and must not overlap (empty ones may touch the next). Returns ``(offsets, data)``
    ready for an Arrow binary array: int32 offsets of length ``len(starts) + 1``.
    """
    lengths = (ends - starts).astype(np.int64)
    offsets = np.zeros(len(starts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1]) if len(starts) else 0
    if total == 0:
        return offsets, np.zeros(0, dtype=np.uint8)
    if total * 4 < len(buf) and total < 32 * len(starts):
        # Few short slices out of a large buffer (topics): index only the bytes taken. The
        # index costs 16 bytes per byte taken, so longer slices (properties) take the mask.
        shift = np.repeat(starts - offsets[:-1], lengths)
        return offsets, buf[np.arange(total) + shift]
    # A keep-mask built from run lengths: (gap, slice) pairs, then the tail after the last slice.
    gaps = starts - np.concatenate(([0], ends[:-1]))
    runs = np.empty(2 * len(starts) + 1, dtype=np.int64)
    runs[0:-1:2] = gaps
    runs[1::2] = lengths
    runs[-1] = len(buf) - ends[-1]
    pattern = np.zeros(len(runs), dtype=np.bool_)
    pattern[1::2] = True
    return offsets, buf[np.repeat(pattern, runs)]


def binary_array(offsets: np.ndarray, data: np.ndarray, typ: pa.DataType = pa.binary()) -> pa.Array:
    """Arrow binary/string array from int32 offsets and a uint8 data buffer (no copy)."""
    n = len(offsets) - 1
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def be_uint(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of ``width`` bytes at positions ``at`` (vectorised)."""
    raw = _windows(buf, at, width)
    if raw is None:
        idx = np.minimum(at[:, None] + np.arange(width), len(buf) - 1)  # short records read in bounds; masked later
        raw = np.ascontiguousarray(buf[idx])
    return raw.view(f">u{width}").reshape(-1).astype(np.uint64 if width == 8 else np.int64)


def be_int(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers (two's complement) of ``width`` bytes at positions ``at``, as int64.

    Positions outside ``buf`` read clamped bytes (callers mask those rows).

    >>> be_int(np.frombuffer(b"\\xff\\xfe\\x00\\x01", np.uint8), np.array([0, 2]), 2).tolist()
    [-2, 1]
    """
    raw = _windows(buf, at, width)
    if raw is None:
        idx = np.clip(at[:, None] + np.arange(width), 0, max(len(buf) - 1, 0))
        raw = np.ascontiguousarray(buf[idx]) if len(buf) else np.zeros((len(at), width), np.uint8)
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


def _windows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray | None:
    """``buf[at[i]:at[i] + width]`` as rows of a matrix, or None if one runs out of ``buf``.

    Rows of a (read-only) sliding-window view are taken whole, a small copy each, where an
    index matrix would be built and clipped for every byte.
    """
    if len(at) == 0 or len(buf) < width or at.min() < 0 or at.max() > len(buf) - width:
        return None
    view = np.lib.stride_tricks.as_strided(buf, (len(buf) - width + 1, width), (1, 1), writeable=False)
    return view[at]


def constant(value, n: int, typ: pa.DataType = pa.string()) -> pa.Array:
    """``n`` copies of one value (null if None), without a Python list of ``n`` items."""
    return pa.repeat(pa.scalar(value, typ), n)


#: Columns of one value on every row of a chunk: (texts, int32 numbers), each a list of
#: (column, value or None). The native core takes them as they are (``add_constants``); the
#: Python path makes them with :func:`constant_columns`.
Constants = tuple[list[tuple[str, str | None]], list[tuple[str, int | None]]]


def constant_columns(constants: Constants, n: int) -> dict[str, pa.Array]:
    """The columns ``constants`` name, ``n`` rows each.

    >>> {k: v.to_pylist() for k, v in constant_columns(([("a", "x")], [("b", None)]), 2).items()}
    {'a': ['x', 'x'], 'b': [None, None]}
    """
    texts, ints = constants
    return {**{name: constant(v, n) for name, v in texts}, **{name: constant(v, n, pa.int32()) for name, v in ints}}


def scatter(arr: pa.Array, where: np.ndarray, n: int) -> pa.Array:
    """Spread ``arr`` (one value per row in ``where``) over ``n`` rows, null elsewhere."""
    if len(where) == n:
        return arr
    idx = np.zeros(n, np.int64)
    idx[where] = np.arange(len(where))
    missing = np.ones(n, np.bool_)
    missing[where] = False
    return arr.take(pa.array(idx, mask=missing))


_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def hex_upper(matrix: np.ndarray) -> pa.Array:
    """Each row of a ``(n, k)`` uint8 matrix as a ``2k``-character upper-case hex string.

    >>> hex_upper(np.array([[0x64, 0x51], [0, 255]], np.uint8)).to_pylist()
    ['6451', '00FF']
    """
    n, k = matrix.shape
    out = np.empty((n, 2 * k), np.uint8)
    out[:, 0::2] = _HEX[matrix >> 4]
    out[:, 1::2] = _HEX[matrix & 15]
    offsets = np.arange(0, 2 * k * (n + 1), 2 * k, dtype=np.int32)
    return binary_array(offsets, out.reshape(-1), pa.string())


def source_batch(columns: dict[str, pa.Array], n: int) -> pa.RecordBatch:
    """A SOURCE_SCHEMA batch of ``n`` rows; columns not given are all null."""
    arrays = []
    for f in SOURCE_SCHEMA:
        arr = columns.get(f.name)
        if arr is None:
            arr = pa.nulls(n, f.type)
        elif arr.type != f.type:
            arr = arr.cast(f.type)
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=SOURCE_SCHEMA)


@dataclass
class QuarantineBuilder:
    """Collects quarantined records of one segment; built into one SOURCE_SCHEMA batch."""

    source_format: str
    seg: SegmentInfo
    positions: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def add(self, position: int, raw: bytes, reason: str) -> None:
        """Quarantine ``raw`` found at ``position``, split in chunks if it is long."""
        if len(raw) <= MAX_QUARANTINE_CHUNK:
            self.positions.append(position)
            self.raws.append(bytes(raw))
            self.lengths.append(len(raw))
            self.reasons.append(reason)
            return
        for off in range(0, len(raw), MAX_QUARANTINE_CHUNK):
            self.positions.append(position + off)
            piece = bytes(raw[off : off + MAX_QUARANTINE_CHUNK])
            self.raws.append(piece)
            self.lengths.append(len(piece))
            self.reasons.append(reason)

    def add_loss(self, position: int, length: int, reason: str) -> None:
        """Record bytes that can no longer be read (deleted file): no raw bytes, the length kept."""
        self.positions.append(position)
        self.raws.append(b"")
        self.lengths.append(length)
        self.reasons.append(reason)

    @property
    def nbytes(self) -> int:
        return sum(self.lengths)

    def build(self) -> pa.RecordBatch:
        n = len(self.positions)
        return source_batch(
            {
                "topic": pa.array([self.seg.topic] * n, pa.string()),
                "partition": pa.array([self.seg.partition] * n, pa.int32()),
                "sourceFormat": pa.array([self.source_format] * n, pa.string()),
                "segment": pa.array([self.seg.segment] * n, pa.string()),
                "segmentPosition": pa.array(self.positions, pa.int64()),
                "recordLength": pa.array(self.lengths, pa.int64()),
                "reason": pa.array(self.reasons, pa.string()),
                "rawBytes": pa.array(self.raws, pa.binary()),
            },
            n,
        )


def padding_batch(source_format: str, seg: SegmentInfo, position: int, length: int) -> pa.RecordBatch:
    """One accounting row for bytes that hold no record by design (an end-of-file blank).

    It has neither a ``reason`` nor a ``messageId``: the sink counts it and writes it nowhere.
    """
    return source_batch(
        {
            "topic": pa.array([seg.topic], pa.string()),
            "partition": pa.array([seg.partition], pa.int32()),
            "sourceFormat": pa.array([source_format]),
            "segment": pa.array([seg.segment]),
            "segmentPosition": pa.array([position], pa.int64()),
            "recordLength": pa.array([length], pa.int64()),
        },
        1,
    )


def quarantine_range(source_format: str, seg: SegmentInfo, fd: int, a: int, b: int, reason: str,
                     chunk_bytes: int) -> Iterator[DecodeResult]:
    """Quarantine the raw bytes ``[a, b)`` of an open file, a read of about ``chunk_bytes`` at a time.

    Rows are cut every ``MAX_QUARANTINE_CHUNK`` bytes from ``a`` and reads hold whole rows, so the
    rows are the same whatever the chunk size; a broken region as large as its file (a segment
    whose framing is lost near its start) is never held in memory whole. Bytes gone before they
    were read (the file shrank) are a loss row.
    """
    step = max(chunk_bytes // MAX_QUARANTINE_CHUNK, 1) * MAX_QUARANTINE_CHUNK
    pos = a
    while pos < b:
        data = os.pread(fd, min(b - pos, step), pos)
        if not data:
            break  # the file shrank
        qb = QuarantineBuilder(source_format, seg)
        qb.add(pos, data, reason)
        pos += len(data)
        yield DecodeResult(qb.build(), pos, 0, len(data))
    if pos < b:
        yield shrink_loss(source_format, seg, pos, b)


def shrink_loss(source_format: str, seg: SegmentInfo, gone_from: int, planned_end: int) -> DecodeResult:
    """The result for committed bytes that vanished while being read (the file shrank)."""
    qb = QuarantineBuilder(source_format, seg)
    qb.add_loss(gone_from, planned_end - gone_from, f"file shrank while being read (rolled back?): committed bytes "
                                                    f"{gone_from}..{planned_end} are gone")
    return DecodeResult(qb.build(), planned_end, 0, planned_end - gone_from)


def concat_batches(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One record batch from several of the same schema."""
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


@dataclass
class RootDecode:
    """Everything committed under a source root, decoded without Spark."""

    table: pa.Table
    scan: ScanResult
    decoded_bytes: int
    quarantined_bytes: int
    padding_bytes: int = 0

    @property
    def messages(self) -> pa.Table:
        return self.table.filter(pa.compute.is_valid(self.table["messageId"]))

    @property
    def quarantined(self) -> pa.Table:
        return self.table.filter(pa.compute.is_valid(self.table["reason"]))


def decode_root(codec: SegmentCodec, root: str) -> RootDecode:
    """Scan ``root`` and decode every committed byte of every segment (tests, benchmarks, tools)."""
    scan = codec.scan(root)
    batches, decoded, quarantined, padding = [], 0, 0, 0
    for seg in scan.segments:
        for res in codec.decode(root, seg, 0, seg.committed_end):
            batches.append(res.batch)
            decoded += res.decoded_bytes
            quarantined += res.quarantined_bytes
            padding += res.padding_bytes
    table = pa.Table.from_batches(batches, schema=SOURCE_SCHEMA)
    return RootDecode(table, scan, decoded, quarantined, padding)
