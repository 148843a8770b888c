"""Apache RocketMQ CommitLog files -> unified schema (spec: rocketmq-commitlog.md).

A broker's ``store/commitlog/`` holds files named by their start offset (20 digits), each
pre-sized to the same length. Records follow each other from byte 0 (spec §1.2)::

    TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
    BORNHOST(8|20) STORETIMESTAMP STOREHOST(8|20) RECONSUMETIMES PREPAREDTRANSACTIONOFFSET
    BODYLENGTH BODY TOPICLENGTH(1|2) TOPIC PROPERTIESLENGTH PROPERTIES

and a file ends with a blank record (TOTALSIZE = the space left, BLANK magic) or, in the
file being written, with zeros. Framing is walked record by record (the TOTALSIZE chain,
each step checked against the magic and PHYSICALOFFSET = file start + position); every
field is then read for all records of a chunk at once with NumPy, and properties are parsed
with Arrow string kernels (:mod:`msglake.formats.rocketmq_properties`).

Bad bytes never stop a read: a record that fails a check is quarantined whole; where the
framing itself is broken (bad magic, impossible TOTALSIZE), the reader searches forward for
the next record whose PHYSICALOFFSET matches its place, quarantines the bytes in between,
and goes on from there.

When the native core is installed (:mod:`msglake.formats.native`, built from ``native/``),
the walk, the record checks and every column made from a record's bytes (CRC32, properties,
hosts, ids, inner batches, the property-derived columns) come from it in one pass per chunk;
the NumPy/Arrow steps here stay the reference it is tested against.
"""
from __future__ import annotations

import errno
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Annotated, Iterator

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import AfterValidator

from msglake.formats import rocketmq_layout as L
from msglake.formats import rocketmq_properties as P
from msglake.formats import native as NV
from msglake.formats.native import NativeCodec
from msglake.formats.options import CodecOptions, PositiveInt
from msglake.formats.base import (
    DecodeResult,
    QuarantineBuilder,
    ScanResult,
    SegmentInfo,
    be_int,
    binary_array,
    concat_batches,
    Constants,
    constant_columns,
    gather_slices,
    hex_upper,
    padding_batch,
    quarantine_range,
    scatter,
    shrink_loss,
    source_batch,
)
from msglake.schemas.messages import DEFAULT_PRIORITY, TS
from msglake.schemas.source import SOURCE_SCHEMA

NAME = "rocketmq-commitlog"
SOURCE_FORMAT = "rocketmq_commitlog"
#: Bytes decoded per step; bounds memory whatever the backlog. A chunk and the columns made of
#: it should stay in cache while the previous chunk's columns are still held (as a Spark task
#: holds them): native passes of the suite's 1M set took 0.76-0.78 s with 1-2 MiB chunks and
#: 0.82-0.84 s with 4 MiB; 512 KiB paid more in per-chunk steps than it gained (0.87-0.90 s).
CHUNK_BYTES = 2 << 20
#: Bytes searched per read when looking for the next valid record after broken framing.
RESYNC_WINDOW = 8 << 20
#: Bytes a record check needs to see: TOTALSIZE .. PHYSICALOFFSET.
_CHECK_BYTES = 36

_HEAD = struct.Struct(">ii")
_PHY = struct.Struct(">q")


# ----------------------------------------------------------------------------- framing


class Framing:
    """Records found in a buffer: start positions and TOTALSIZEs (buffer-relative).

    The native decode step (``rmq_chunk``) gives ``positions``/``lengths`` as a batch of the core
    (``core_numbers``), imported only when they are asked for: the usual chunk, every record
    decoded, needs only ``records``. Importing them, the rows' record indexes and their lengths'
    sum was 4 % of a native pass."""

    __slots__ = ("_positions", "_lengths", "_core_numbers", "records", "stop", "kind", "why", "need", "decoded")

    def __init__(self, positions: np.ndarray | None, lengths: np.ndarray | None, stop: int, kind: str,
                 why: str = "", need: int = 0, *, records: int | None = None, core_numbers=None,
                 decoded: _CoreRows | None = None):
        self._positions, self._lengths, self._core_numbers = positions, lengths, core_numbers
        #: How many records were found (``len(positions)``).
        self.records = len(positions) if records is None else records
        self.stop = stop  # first position not covered by a record
        #: "end" (walked to ``end``), "incomplete" (a valid record runs past ``end``, read more),
        #: "blank" (end-of-file record at ``stop``), "zero" (zero bytes where a record should
        #: start: the unwritten tail of the file being written), "broken" (framing lost at ``stop``).
        self.kind = kind
        self.why = why
        self.need = need  # for "incomplete": the TOTALSIZE of the record at ``stop``
        #: The records already decoded by the native core as it walked them (:meth:`RocketMqCommitLogCodec._frame`).
        self.decoded = decoded

    @property
    def positions(self) -> np.ndarray:
        """Where each record starts."""
        if self._positions is None:
            self._import()
        return self._positions

    @property
    def lengths(self) -> np.ndarray:
        """Each record's TOTALSIZE."""
        if self._lengths is None:
            self._import()
        return self._lengths

    def _import(self) -> None:
        at = NV.arrow_as(self._core_numbers, NV.POSITIONS_LENGTHS)
        self._positions, self._lengths, self._core_numbers = NV.numbers(at, 0), NV.numbers(at, 1), None

    def __repr__(self) -> str:
        return f"Framing({self.records} records, stop={self.stop}, kind={self.kind!r}, why={self.why!r})"


@dataclass
class _CoreRows:
    """What the native core made of a chunk's records as it walked them (``rmq_chunk``)."""

    rows: pa.RecordBatch  # a source batch (``SOURCE_SCHEMA``): one row per message of the records that passed
    outer: object  # the record each row comes from, a native batch (:meth:`record_of_rows` imports it)
    nbytes: int  # the rows' recordLength summed
    reasons: list  # (record index, why) of the records that failed a check

    def record_of_rows(self) -> np.ndarray:
        return NV.numbers(NV.arrow_as(self.outer, NV.OUTER), 0)


_PHY_FLAG = struct.Struct(">qi")  # PHYSICALOFFSET, SYSFLAG
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def check_record(buf, pos: int, size: int, phys: int) -> str | None:
    """Why the record of TOTALSIZE ``size`` at ``buf[pos]`` cannot be one, or None.

    The broker's own framing check (``CommitLog.checkMessageAndReturnSize``): the
    PHYSICALOFFSET is the record's place, and the body, topic and properties lengths add up
    to TOTALSIZE. ``buf[pos:pos + size]`` must be readable.
    """
    at, sysflag = _PHY_FLAG.unpack_from(buf, pos + 28)
    if at != phys:
        return f"PHYSICALOFFSET {at} does not match the record's place {phys}"
    v2 = _HEAD.unpack_from(buf, pos)[1] == L.MAGIC_V2
    blen_at = pos + 68 + (20 if sysflag & L.BORNHOST_V6_FLAG else 8) + (20 if sysflag & L.STOREHOST_V6_FLAG else 8)
    end = pos + size
    (blen,) = _I32.unpack_from(buf, blen_at)
    tl_at = blen_at + 4 + blen
    width = 2 if v2 else 1
    if blen < 0 or tl_at + width + 2 > end:
        return f"BODYLENGTH {blen} disagrees with TOTALSIZE {size}"
    tlen = _I16.unpack_from(buf, tl_at)[0] if v2 else (buf[tl_at] ^ 0x80) - 0x80
    pl_at = tl_at + width + tlen
    if tlen < 0 or pl_at + 2 > end:
        return f"TOPICLENGTH {tlen} disagrees with TOTALSIZE {size} (body {blen})"
    (plen,) = _I16.unpack_from(buf, pl_at)
    if plen < 0 or pl_at + 2 + plen != end:
        return (f"lengths disagree with TOTALSIZE {size}: body {blen}, topic {tlen}, properties {plen} "
                f"make {pl_at + 2 + plen - pos}")
    return None


def walk(buf, start: int, end: int, hard_end: int, phys_base: int, file_end: int | None = None, core=None) -> Framing:
    """Walk the TOTALSIZE chain of ``buf[start:end]``, checking each record's framing.

    ``hard_end`` (>= ``end``) is where the data really ends: a record running past ``end``
    but not ``hard_end`` is "incomplete" (the caller reads more), past ``hard_end`` it is
    "broken". ``phys_base`` is the physical offset of ``buf[0]``; ``file_end`` the end of the
    file relative to ``buf`` (default ``hard_end``): a blank record must reach exactly there.

    The chain is walked record by record (each step depends on the last); the framing check
    of :func:`check_record` then runs on all records at once, and the walk is cut at the first
    record that fails it, which becomes the "broken" point. The native ``core``, when given,
    checks each record as it steps.
    """
    if core is not None:
        at, stop, kind, why, need = core.rmq_walk(buf, start, end, hard_end, phys_base,
                                                  hard_end if file_end is None else file_end)
        at = NV.arrow_as(at, NV.POSITIONS_LENGTHS)
        return Framing(NV.numbers(at, 0), NV.numbers(at, 1), stop, kind, why, need)
    fr = _chain(buf, start, end, hard_end, file_end)
    bad = _first_misframed(buf, fr.positions, fr.lengths, phys_base)
    if bad is None:
        return fr
    pos, size = int(fr.positions[bad]), int(fr.lengths[bad])
    return Framing(fr.positions[:bad], fr.lengths[:bad], pos, "broken", check_record(buf, pos, size, phys_base + pos) or "")


def _first_misframed(buf, positions: np.ndarray, lengths: np.ndarray, phys_base: int) -> int | None:
    """Index of the first record failing :func:`check_record` (the same rules, vectorised), or None."""
    if len(positions) == 0:
        return None
    a = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
    p, end = positions, positions + lengths
    sysflag = be_int(a, p + 36, 4)
    v2 = be_int(a, p + 4, 4) == L.MAGIC_V2
    width = np.where(v2, 2, 1)
    blen_at = p + 68 + np.where(sysflag & L.BORNHOST_V6_FLAG, 20, 8) + np.where(sysflag & L.STOREHOST_V6_FLAG, 20, 8)
    blen = be_int(a, blen_at, 4)
    tl_at = blen_at + 4 + blen
    ok = (be_int(a, p + 28, 8) == phys_base + p) & (blen >= 0) & (tl_at + width + 2 <= end)
    tl_at = np.where(ok, tl_at, p)
    tlen = np.where(v2, be_int(a, tl_at, 2), be_int(a, tl_at, 1))
    pl_at = tl_at + width + tlen
    ok &= (tlen >= 0) & (pl_at + 2 <= end)
    pl_at = np.where(ok, pl_at, p)
    plen = be_int(a, pl_at, 2)
    ok &= (plen >= 0) & (pl_at + 2 + plen == end)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else None


def _chain(buf, start: int, end: int, hard_end: int, file_end: int | None) -> Framing:
    """The TOTALSIZE chain with the per-step checks (magic, sizes, blank), no content checks."""
    file_end = hard_end if file_end is None else file_end
    positions: list[int] = []
    append = positions.append
    head = _HEAD.unpack_from
    v1, v2, smallest = L.MAGIC_V1, L.MAGIC_V2, L.MIN_RECORD
    pos, last, kind, why, need = start, end - 8, "end", "", 0
    # The common step first, in the fewest Python operations: the one hot loop of the walk.
    while pos <= last:
        size, magic = head(buf, pos)
        if (magic == v1 or magic == v2) and size >= smallest and pos + size <= end:
            append(pos)
            pos += size
            continue
        if magic == v1 or magic == v2:
            if size < smallest:
                kind, why = "broken", f"TOTALSIZE {size} is smaller than the {L.MIN_RECORD}-byte fixed part"
            elif pos + size > hard_end:
                kind, why = "broken", f"TOTALSIZE {size} runs past the end of the data ({hard_end - pos} bytes left)"
            else:
                kind, need = "incomplete", size
        elif magic == L.MAGIC_BLANK:
            if pos + size == file_end:
                kind = "blank"
            else:
                kind, why = "broken", f"BLANK magic with TOTALSIZE {size} does not end the file ({file_end - pos} bytes left)"
        elif size == 0 and magic == 0:
            kind, why = "zero", "zero bytes where a record should start"
        else:
            kind, why = "broken", f"bad magic code 0x{magic & 0xFFFFFFFF:08X} (TOTALSIZE {size})"
        break
    else:
        if pos < end:  # fewer than 8 bytes left
            kind, why = ("incomplete", "") if pos + 8 <= hard_end else (
                "broken", f"{hard_end - pos} bytes at the end of the data, too few for a record header")
    at = np.asarray(positions, np.int64)
    lengths = np.diff(at, append=pos) if len(at) else np.zeros(0, np.int64)
    return Framing(at, lengths, pos, kind, why, need)


def resync(fd: int, start: int, stop: int, file_offset: int, file_size: int) -> int | None:
    """The first position in ``[start, stop)`` where a valid record (or the end-of-file blank) begins.

    A valid record has a v1/v2 magic, a TOTALSIZE that fits, a PHYSICALOFFSET equal to its
    own place and lengths that add up (:func:`check_record`): bytes inside a body practically
    never pass all of that. A blank must end exactly at the end of the file.
    """
    a = start
    while a < stop:
        data_at = _skip_hole(fd, a, stop)
        if data_at >= stop:
            break
        # A record's magic (bytes 4..8) is never zero, so none starts 8 or more bytes before data.
        a = max(a, data_at - 8)
        b = min(stop, a + RESYNC_WINDOW)
        data = os.pread(fd, b - a + _CHECK_BYTES, a)
        if _zeros(data):  # the unwritten tail of a pre-sized file: nothing to find (fast path)
            a = b
            continue
        i = 0
        while True:
            q, blank = _candidate(data, a, i, b, stop, file_offset, file_size)
            if q is None:
                break
            if blank:
                return q
            (size,) = _I32.unpack_from(data, q - a)
            if check_record(os.pread(fd, size, q), 0, size, file_offset + q) is None:
                return q
            i = q - a + 1
        a = b
    return None


def _candidate(data: bytes, base: int, i: int, b: int, stop: int, file_offset: int, file_size: int):
    """(position, is blank) of the first plausible record start in ``data[i:]`` before ``b``; (None, False) if none."""
    best = None
    j = data.find(L.MAGIC_PREFIX, i + 4)
    while j >= 0 and j - 4 + base < b:  # records: the magic sits 4 bytes in
        q = j - 4 + base
        if j + 4 <= len(data) and data[j + 3] in (0xA7, 0xAB) and j - 4 + _CHECK_BYTES <= len(data):
            (size,) = _I32.unpack_from(data, j - 4)
            (at,) = _PHY.unpack_from(data, j - 4 + 28)
            if L.MIN_RECORD <= size <= stop - q and at == file_offset + q:
                best = q
                break
        j = data.find(L.MAGIC_PREFIX, j + 1)
    j = data.find(L.BLANK_BYTES, i + 4)
    while j >= 0 and j - 4 + base < b and (best is None or j - 4 + base < best):
        q = j - 4 + base
        if _I32.unpack_from(data, j - 4)[0] == file_size - q:
            return q, True
        j = data.find(L.BLANK_BYTES, j + 1)
    return best, False


# ----------------------------------------------------------------------------- decode


@dataclass
class _Rows:
    """Messages of the well-framed records of a chunk (an inner batch gives several)."""

    outer: np.ndarray  # index of the record each message comes from
    pos: np.ndarray  # buffer position of the message (record, or mini-record of a batch)
    body_a: np.ndarray
    body_b: np.ndarray
    props_a: np.ndarray
    props_b: np.ndarray
    flag: np.ndarray
    crc: np.ndarray
    length: np.ndarray  # bytes to account per row (an inner batch's whole record on its first row)
    index: np.ndarray  # position inside an inner batch (0 for plain records)


class _Reasons:
    """First reason each record fails, by record index."""

    def __init__(self, n: int):
        self.ok = np.ones(n, np.bool_)
        self.reason = np.full(n, None, dtype=object)

    def fail(self, mask: np.ndarray, why) -> None:
        """Mark ``mask`` records (those still ok) bad; ``why`` is a string or a function of an index."""
        new = mask & self.ok
        for i in np.flatnonzero(new).tolist():
            self.reason[i] = why(i) if callable(why) else why
        self.ok &= ~new


def _host_strings(buf: np.ndarray, at: np.ndarray, v6: np.ndarray) -> pa.Array:
    """``ip:port`` for host fields at ``at`` (IPv6 where ``v6``), formatted once per distinct host."""
    m = len(at)
    out = pa.nulls(m, pa.string())
    for mask, width in ((~v6, 8), (v6, 20)):
        where = np.flatnonzero(mask)
        if len(where) == 0:
            continue
        raw = np.ascontiguousarray(buf[at[where, None] + np.arange(width)])
        # IPv4 ip+port fits a uint64, which np.unique sorts far faster than raw bytes.
        keys = raw.view(np.uint64 if width == 8 else f"V{width}").reshape(-1)
        uniq, inverse = np.unique(keys, return_inverse=True)
        names = pa.array([L.format_host(u.tobytes()) for u in uniq], pa.string())
        out = pc.coalesce(out, scatter(names.take(pa.array(inverse.reshape(-1))), where, m))
    return out


def _message_ids(buf: np.ndarray, store_at: np.ndarray, record_at: np.ndarray, v6: np.ndarray) -> pa.Array:
    """Offset msgIds: store ip + port + PHYSICALOFFSET as upper-case hex (32 or 56 characters)."""
    m = len(store_at)
    out = pa.nulls(m, pa.string())
    for mask, width in ((~v6, 8), (v6, 20)):
        where = np.flatnonzero(mask)
        if len(where) == 0:
            continue
        host = buf[store_at[where, None] + np.arange(width)]
        offset = buf[record_at[where, None] + 28 + np.arange(8)]
        out = pc.coalesce(out, scatter(hex_upper(np.concatenate([host, offset], axis=1)), where, m))
    return out


def _split_keys(keys: pa.Array) -> pa.Array:
    """KEYS split on spaces, empty pieces left out."""
    pieces = pc.split_pattern(keys, " ")
    flat = pc.list_flatten(pieces)
    rows = pc.list_parent_indices(pieces).to_numpy()
    keep = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    counts = np.bincount(rows[keep], minlength=len(keys))
    offsets = np.zeros(len(keys) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, mask=np.append(~pc.is_valid(keys).to_numpy(zero_copy_only=False), False)),
                                    flat.filter(keep))


def _int_values(values: pa.Array, digits: int = 15) -> pa.Array:
    """Decimal strings of up to ``digits`` digits -> int64; anything else -> null."""
    numeric = pc.match_substring_regex(values, rf"^-?[0-9]{{1,{digits}}}$")
    return pc.if_else(numeric, values, pa.scalar(None, pa.string())).cast(pa.int64())


#: Epoch milliseconds a Spark TIMESTAMP holds (years 1..9999); others cannot be stored.
_MS_MIN, _MS_MAX = -62_135_596_800_000, 253_402_300_799_999


def _in_range(ms: np.ndarray) -> np.ndarray:
    return (ms >= _MS_MIN) & (ms <= _MS_MAX)


def _timestamps(ms) -> pa.Array:
    """Epoch milliseconds (int64 array, nulls allowed) -> the schema's timestamps; out of range -> null."""
    if isinstance(ms, np.ndarray) and _in_range(ms).all():
        return pa.Array.from_buffers(TS, len(ms), [None, pa.py_buffer(ms.astype(np.int64) * 1000)])
    arr = pa.array(ms, pa.int64())
    ok = pc.and_(pc.greater_equal(arr, _MS_MIN), pc.less_equal(arr, _MS_MAX))
    arr = pc.if_else(ok, arr, pa.scalar(None, pa.int64()))
    return pc.multiply(arr, 1000).cast(TS)


def _decompress(body: bytes, codec: str) -> bytes:
    if codec == "zlib":
        return zlib.decompress(body)
    if codec == "lz4":
        return bytes(cramjam.lz4.decompress(body))
    if codec == "zstd":
        return bytes(cramjam.zstd.decompress(body))
    raise ValueError(f"unknown compression type {codec}")


def _unwrap(buf: np.ndarray, a: int, b: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """Mini-records of an inner-batch body ``buf[a:b]`` (spec §5.7): (pos, flag, crc, body a/b, props a/b)."""
    out = []
    q = a
    data = buf[a:b].tobytes()
    while q < b:
        r = q - a
        if b - q < 22:
            raise ValueError(f"inner batch: {b - q} bytes left at {q}, too few for a message")
        size, _magic, crc, flag, blen = struct.unpack_from(">iiiii", data, r)
        if blen < 0 or q + 22 + blen > b:
            raise ValueError(f"inner batch: body length {blen} at {q} runs past the batch")
        (plen,) = struct.unpack_from(">h", data, r + 20 + blen)
        if plen < 0 or size != 22 + blen + plen or q + size > b:
            raise ValueError(f"inner batch: message size {size} at {q} disagrees with its lengths")
        out.append((q, flag, crc, q + 20, q + 20 + blen, q + 22 + blen, q + 22 + blen + plen))
        q += size
    if not out:
        raise ValueError("inner batch holds no message")
    return out


def _python_messages(buf: np.ndarray, p: np.ndarray, tot: np.ndarray, verify_crc: bool, message_rows) -> _Messages:
    """Every message of the framed records with NumPy and Arrow kernels, a column at a time (the reference)."""
    n = len(p)
    r = _Reasons(n)
    v2 = be_int(buf, p + 4, 4) == L.MAGIC_V2
    crc = be_int(buf, p + 8, 4)
    sysflag = be_int(buf, p + 36, 4)
    born_v6 = (sysflag & L.BORNHOST_V6_FLAG) != 0
    store_v6 = (sysflag & L.STOREHOST_V6_FLAG) != 0
    store_ts_at = p + L.BORN_HOST_AT + np.where(born_v6, 20, 8)
    store_at = store_ts_at + 8
    recon_at = store_at + np.where(store_v6, 20, 8)
    body_at = recon_at + 16
    # walk() checked that the lengths add up (check_record), so the positions are sound.
    blen = be_int(buf, body_at - 4, 4)
    tl_at = body_at + blen
    tlen = np.where(v2, be_int(buf, tl_at, 2), be_int(buf, tl_at, 1))
    topic_at = tl_at + np.where(v2, 2, 1)
    pl_at = topic_at + tlen
    plen = be_int(buf, pl_at, 2)
    born_all = be_int(buf, p + 40, 8)
    store_all = be_int(buf, store_ts_at, 8)
    r.fail(~_in_range(born_all), lambda i: f"BORNTIMESTAMP {born_all[i]} is not a time")
    r.fail(~_in_range(store_all), lambda i: f"STORETIMESTAMP {store_all[i]} is not a time")
    if verify_crc:
        check = np.flatnonzero(r.ok)
        a = body_at[check]
        bodies = map(memoryview(buf).__getitem__, map(slice, a.tolist(), (a + blen[check]).tolist()))
        actual = np.fromiter(map(zlib.crc32, bodies), np.int64, len(check)) & 0x7FFFFFFF
        wrong = actual != crc[check]
        for i, got in zip(check[wrong].tolist(), actual[wrong].tolist()):
            r.reason[i] = f"BODYCRC mismatch: stored {crc[i]}, the body's CRC32 is {got}"
            r.ok[i] = False

    rows = message_rows(buf, p, tot, sysflag, body_at, blen, pl_at, plen, crc, r)
    m = len(rows.outer)
    o = rows.outer

    # Topics: one per record (an inner batch's messages share it), checked once per distinct name.
    recs, rec_of_row = np.unique(o, return_inverse=True)
    t_off, t_data = gather_slices(buf, topic_at[recs], (topic_at + tlen)[recs])
    topics = binary_array(t_off, t_data).dictionary_encode()
    codes = topics.indices.to_numpy()[rec_of_row.reshape(-1)] if m else np.zeros(0, np.int64)
    names = []
    for code, raw in enumerate(topics.dictionary.to_pylist()):
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            names.append("")
            r.fail(np.isin(np.arange(n), recs[topics.indices.to_numpy() == code]), "TOPIC is not valid UTF-8")
    topic = pa.array(names, pa.string()).take(pa.array(codes))

    p_off, p_data = gather_slices(buf, rows.props_a, rows.props_b)
    raw_props = binary_array(p_off, p_data)
    try:
        texts = raw_props.cast(pa.string())
    except pa.ArrowInvalid:
        bad = []
        for j, v in enumerate(raw_props.to_pylist()):
            try:
                v.decode("utf-8")
            except UnicodeDecodeError:
                bad.append(j)
        r.fail(np.isin(np.arange(n), o[bad]), "PROPERTIES are not valid UTF-8")
        texts = pc.if_else(np.isin(np.arange(m), bad), pa.scalar(b""), raw_props).cast(pa.string())
    b_off, b_data = gather_slices(buf, rows.body_a, rows.body_b)
    return _Messages(
        r, o, rows.pos, rows.flag, rows.crc, rows.length, topic, P.parse(texts), binary_array(b_off, b_data),
        queue_id=be_int(buf, p + 12, 4)[o], queue_offset=be_int(buf, p + 20, 8)[o] + rows.index,
        physical_offset=be_int(buf, p + 28, 8)[o], sysflag=sysflag[o], born_ms=born_all[o],
        store_ms=store_all[o], reconsume=be_int(buf, recon_at, 4)[o], prepared=be_int(buf, recon_at + 4, 8)[o],
        born_host=_host_strings(buf, (p + L.BORN_HOST_AT)[o], born_v6[o]),
        store_host=_host_strings(buf, store_at[o], store_v6[o]),
        message_id=_message_ids(buf, store_at[o], p[o], store_v6[o]),
    )


#: The rules of ``rocketmq_layout`` the native core applies (after the delay levels).
_NATIVE_RULES = (sorted(L.RESERVED_KEYS), sorted(L.SYSTEM_TOPICS), L.SYSTEM_TOPIC_PREFIX)


def _native_decoded(core: _CoreRows, n: int) -> _Decoded:
    """What :func:`_python_messages`, ``RocketMqCommitLogCodec._record_columns`` and
    ``_property_columns`` make, by the native core: the rows it made of a chunk's ``n`` records as
    it walked them (``rmq_chunk``), already a source batch (``SOURCE_SCHEMA``), handed over
    through the Arrow C Data Interface."""
    r = _Reasons(n)
    for i, why in core.reasons:
        r.reason[i] = why
        r.ok[i] = False
    rows = core.rows
    return _Decoded(r, core.record_of_rows(), NV.numbers(rows, _RECORD_LENGTH), NV.numbers(rows, _SYSFLAG), None, rows)


#: Where the native rows' accounting columns are (by index: a look-up by name costs more).
_RECORD_LENGTH, _SYSFLAG = SOURCE_SCHEMA.get_field_index("recordLength"), SOURCE_SCHEMA.get_field_index("sysFlag")
_COMPRESSION = SOURCE_SCHEMA.get_field_index("compression")


@dataclass
class _Decoded:
    """A chunk's rows as ``_records`` goes on with them, from either path."""

    r: _Reasons
    o: np.ndarray  # index of the record each row comes from
    length: np.ndarray  # bytes to account per row
    sysflag: np.ndarray
    columns: dict[str, pa.Array] | None  # the unified schema's (a decoded row leaves searchKey, reason, rawBytes null)
    batch: pa.RecordBatch | None = None  # or the native core's rows, already a source batch


def _chunk_constants(segment: str) -> Constants:
    """The columns of one value on every row decoded from ``segment``."""
    return [("sourceFormat", SOURCE_FORMAT), ("segment", segment)], [("priority", DEFAULT_PRIORITY), ("durability", 0)]


#: COMPRESSIONTYPE (SYSFLAG bits 8-10) -> the compression column's name.
_CODEC_LIST = [L.COMPRESSION_TYPES.get(t, f"unknown({t})") for t in range(8)]
_CODEC_NAMES = np.array(_CODEC_LIST, dtype=object)


@dataclass
class _Messages:
    """One row per message of a chunk's records by the Python path (rows of failed records may be
    left in; ``r`` says which)."""

    r: _Reasons
    o: np.ndarray  # index of the record each row comes from
    pos: np.ndarray
    flag: np.ndarray
    crc: np.ndarray
    length: np.ndarray
    topic: pa.Array
    props: P.Properties
    body: pa.Array
    queue_id: np.ndarray
    queue_offset: np.ndarray
    physical_offset: np.ndarray
    sysflag: np.ndarray
    born_ms: np.ndarray
    store_ms: np.ndarray
    reconsume: np.ndarray
    prepared: np.ndarray
    born_host: pa.Array
    store_host: pa.Array
    message_id: pa.Array


def _delay_table(v: str) -> str:
    L.parse_delay_levels(v)
    return v


class RocketMqOptions(CodecOptions):
    """Options of the ``rocketmq-commitlog`` format."""

    #: The broker's ``messageDelayLevel`` table, for ``delayTime`` of DELAY-level messages.
    delayLevels: Annotated[str, AfterValidator(_delay_table)] = L.DEFAULT_DELAY_LEVELS
    #: Return producer-compressed bodies decompressed (zlib, lz4 frame, zstd); by default bodies
    #: are kept as stored and ``compression`` names the codec.
    decompress: bool = False
    #: ``mappedFileSizeCommitLog``; by default the size of the most common file.
    fileSize: PositiveInt | None = None
    #: Check each body against BODYCRC (the broker's ``checkCRCOnRecover``); a mismatch is
    #: quarantined. Turn off only for files whose CRCs are known not to be set.
    verifyCrc: bool = True


class RocketMqCommitLogCodec(NativeCodec):
    """The ``rocketmq-commitlog`` format: a broker's store (or its ``commitlog`` folder).

    Parameters
    ----------
    options : RocketMqOptions, optional
        The format's options; or give them as keywords (``RocketMqCommitLogCodec(verifyCrc=False)``).
    chunk_bytes : int
        Bytes decoded per step.
    """

    name = NAME
    source_format = SOURCE_FORMAT
    Options = RocketMqOptions
    #: A broker makes each CommitLog file at its full size and never cuts one in place: its
    #: recovery deletes the files past the last good record and moves the write position back in
    #: the one that holds it, and retention deletes whole files (a deleted file stays readable
    #: while mapped). So the native path maps them (``NativeCodec._mapped``).
    maps_files = True

    def __init__(self, options: RocketMqOptions | None = None, /, *, chunk_bytes: int = CHUNK_BYTES, **fields):
        self.options = options if options is not None else RocketMqOptions(**fields)
        self._native = self.options.native
        self._attach_core()
        self.delay_levels = np.asarray(L.parse_delay_levels(self.options.delayLevels), np.int64)
        self.decompress = self.options.decompress
        self.verify_crc = self.options.verifyCrc
        self.file_size = self.options.fileSize
        self.chunk_bytes = chunk_bytes
        # path -> (committed end, data end) of the file being written, so each scan walks
        # only the records appended since the last one.
        self._walked: dict[str, tuple[int, int]] = {}

    # ---------------------------------------------------------------- scan (driver side)

    @staticmethod
    def commitlog_dir(root: str) -> tuple[str, str]:
        """(folder holding the files, its path relative to ``root``): ``root/commitlog`` or ``root``."""
        if os.path.isdir(os.path.join(root, "commitlog")):
            return os.path.join(root, "commitlog"), "commitlog/"
        return root, ""

    def scan(self, root: str) -> ScanResult:
        """Every CommitLog file under ``root``, with how far its data is committed."""
        if not os.path.isdir(root):
            raise FileNotFoundError(f"rocketmq-commitlog source path {root!r} is not a directory")
        folder, rel = self.commitlog_dir(root)
        result = ScanResult()
        files: list[tuple[int, os.DirEntry]] = []
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_dir() and rel:  # the broker writes no folder inside a store's commitlog/
                result.ignore_tree(entry.path, rel + entry.name, "in a folder nested in the commitlog folder")
                continue
            if not entry.is_file() or entry.name.startswith("."):
                continue
            if L.FILE_NAME_RE.match(entry.name):
                files.append((int(entry.name), entry))
                continue
            size = entry.stat().st_size
            if not _looks_like_commitlog(entry.path):
                result.ignore(rel + entry.name, "not a CommitLog file (name is not 20 digits, no record at byte 0)", size)
                continue
            # A CommitLog file under another name: its offset is unknown, so no record can be
            # checked; keep its bytes in quarantine rather than guess.
            result.segments.append(
                SegmentInfo(rel + entry.name, entry.name, None, None, size, True, None, size,
                            problem=f"file name {entry.name!r} is not a 20-digit CommitLog offset", whole_file=True)
            )
        if not files:
            return result
        sizes = [e.stat().st_size for _, e in files]
        nonzero = [s for s in sizes if s] or [0]
        expected = self.file_size or max(set(nonzero), key=lambda s: (nonzero.count(s), s))
        prev_end = None
        for i, ((start, entry), size) in enumerate(zip(files, sizes)):
            last = i == len(files) - 1
            if prev_end is not None and start != prev_end:
                if start > prev_end:
                    result.notes.append(f"{rel}{entry.name}: commitlog bytes {prev_end}..{start} are missing "
                                        "(no file holds them)")
                else:
                    result.notes.append(f"{rel}{entry.name}: starts at {start}, inside the previous file "
                                        f"(which ends at {prev_end})")
            prev_end = start + size
            if 0 < expected and size < expected and not last:
                result.notes.append(f"{rel}{entry.name}: file is shorter than its peers ({size:,} of {expected:,} "
                                    "bytes); a record cut at its end is quarantined")
            if expected and start % expected:
                result.notes.append(f"{rel}{entry.name}: start offset {start} is not a multiple of the file size "
                                    f"{expected}")
            if last:
                committed, data_end, sealed = self._live_end(entry.path, start, size)
            else:
                committed, data_end, sealed = size, size, True
            result.segments.append(
                SegmentInfo(rel + entry.name, entry.name, None, None, committed, sealed, start, data_end, file_num=i)
            )
        return result

    def _live_end(self, path: str, start: int, size: int) -> tuple[int, int, bool]:
        """(committed end, data end, sealed) of the file being written.

        The data ends at the zero tail (or at bytes that hold no valid record and no valid
        record after them). Zeros with valid records after them are a corrupt gap, not the
        tail: the rest of the file is searched for a record the first time the file is
        scanned, and again whenever the data end stays put while the file keeps changing.
        The last record is committed only when it is whole (see :func:`_looks_whole`).
        """
        cached = self._walked.get(path)
        mtime = os.stat(path).st_mtime_ns
        pos = cached[0] if cached is not None and cached[0] <= size else 0
        fd = os.open(path, os.O_RDONLY)
        try:
            last = None
            want = self.chunk_bytes
            while pos < size:
                data = os.pread(fd, min(size - pos, want), pos)
                if len(data) < min(size - pos, want):  # the file shrank under us
                    size = pos + len(data)
                    if not data:
                        break
                fr = walk(data, 0, len(data), size - pos, start + pos, core=self._core)
                want = max(self.chunk_bytes, fr.need)  # a record larger than a chunk: read it whole
                if len(fr.positions):
                    last = (pos + int(fr.positions[-1]), int(fr.lengths[-1]))
                pos += fr.stop
                if fr.kind in ("end", "incomplete"):
                    continue
                if fr.kind == "blank":
                    return size, size, True
                stuck = cached is None or (cached[1] == pos and cached[2] != mtime)
                if fr.kind == "broken" or stuck:
                    # Bytes that are not a record: committed if a valid record follows (the
                    # decoder quarantines the gap); else possibly a record being written: wait.
                    q = resync(fd, pos + 1, size, start, size)
                    if q is not None:
                        pos, last = q, None
                        continue
                break
            committed = pos
            if last is not None and last[0] + last[1] == pos and not _looks_whole(fd, *last, self.verify_crc):
                committed = last[0]
            self._walked[path] = (committed, pos, mtime)
            return committed, pos, False
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- planning

    def _record_ends(self, root: str, seg: SegmentInfo, start: int, end: int):
        """Record boundaries from ``start``, a chunk's at a time: yields the positions after its
        records (an increasing int64 array)."""
        fd = os.open(os.path.join(root, seg.path), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            end = min(end, size)
            pos = start
            while pos < end:
                data = os.pread(fd, min(end - pos, self.chunk_bytes), pos)
                if len(data) < min(end - pos, self.chunk_bytes):
                    return  # the file shrank: the decoder reports what is gone
                fr = walk(data, 0, len(data), end - pos, (seg.start_virtual or 0) + pos, size - pos, self._core)
                if len(fr.lengths):
                    ends = pos + np.cumsum(fr.lengths, dtype=np.int64)
                    pos = int(ends[-1])
                    yield ends
                if fr.kind == "incomplete" and fr.stop == 0:
                    pos += fr.need  # one record larger than a chunk (the decoder checks it)
                    yield np.array([pos], np.int64)
                elif fr.kind != "end" and fr.kind != "incomplete":
                    return  # the decoder handles the rest in one go
        finally:
            os.close(fd)

    def _walk_file(self, root: str, seg: SegmentInfo, start: int, end: int):
        """Record boundaries from ``start``: yields (position after a record, records so far)."""
        count = 0
        for ends in self._record_ends(root, seg, start, end):
            for pos in ends.tolist():
                count += 1
                yield pos, count

    def split_points(self, root: str, seg: SegmentInfo, start: int, end: int, target: int) -> list[int]:
        """Record boundaries inside ``(start, end)`` about ``target`` bytes apart: each the first
        at least ``target`` past the one before. Found a chunk's boundaries at a time (a step per
        record in Python was most of planning a batch over a large file: 0.3 s per 1.19M records)."""
        if seg.whole_file or end - start <= target:
            return []
        target = max(target, 1)  # each cut past the one before
        cuts, mark = [], start
        for ends in self._record_ends(root, seg, start, end):
            while True:
                i = int(np.searchsorted(ends, mark + target))
                if i == len(ends) or ends[i] >= end:
                    break
                mark = int(ends[i])
                cuts.append(mark)
        return cuts

    def advance(
        self, root: str, seg: SegmentInfo, start: int, end: int, max_bytes: int | None, max_records: int | None
    ) -> tuple[int, int]:
        """How far to read from ``start`` within a byte and record budget: (boundary, records).

        Always moves past at least one record; where the framing breaks, the rest goes at once.
        """
        if seg.whole_file:
            return (end if max_bytes is None else min(end, start + max(max_bytes, 1))), 0
        pos, count = start, 0
        for nxt, n in self._walk_file(root, seg, start, end):
            if count > 0 and ((max_bytes is not None and nxt - start > max_bytes)
                              or (max_records is not None and count >= max_records)):
                return pos, count
            pos, count = nxt, n
        if pos < end:  # blank, zero tail or broken framing: no more records to count
            return end, count + 1
        return pos, count

    # ---------------------------------------------------------------- decode (task side)

    def decode(self, root: str, seg: SegmentInfo, start: int, end: int) -> Iterator[DecodeResult]:
        """Decode ``[start, end)`` of a file, ``start`` being a record boundary.

        Every byte of the range ends up in a decoded row, a quarantine row, or (the blank
        end of a file) a padding row.
        """
        fd = os.open(os.path.join(root, seg.path), os.O_RDONLY)
        try:
            if seg.whole_file:
                yield from quarantine_range(SOURCE_FORMAT, seg, fd, start, end, seg.problem or "unreadable file",
                                            self.chunk_bytes)
                return
            size = os.fstat(fd).st_size
            stop_at = min(end, size)
            phys0 = seg.start_virtual or 0
            pos = start
            while pos < stop_at:
                want = min(stop_at - pos, self.chunk_bytes)
                data = self._read_chunk(fd, want, pos)
                short = len(data) < want
                if short:  # the file shrank under us
                    stop_at = size = pos + len(data)
                    if not data:
                        break
                fr = self._frame(data, seg.segment, pos, stop_at - pos, phys0 + pos, size - pos)
                if fr.kind == "incomplete" and fr.records == 0 and not short:
                    data = os.pread(fd, fr.need, pos)  # one record larger than the chunk
                    if len(data) < fr.need:
                        stop_at = size = pos + len(data)
                    fr = self._frame(data, seg.segment, pos, stop_at - pos, phys0 + pos, size - pos)
                qb = QuarantineBuilder(SOURCE_FORMAT, seg)
                batch, decoded = self._records(np.frombuffer(data, np.uint8), pos, fr, seg, qb)
                nxt = pos + fr.stop
                parts = [b for b in (batch, qb.build() if qb.positions else None) if b is not None]
                if parts:
                    yield DecodeResult(concat_batches(parts), nxt, decoded, qb.nbytes)
                if fr.kind in ("end", "incomplete"):
                    pos = nxt
                    continue
                if fr.kind == "blank":
                    yield DecodeResult(padding_batch(SOURCE_FORMAT, seg, nxt, stop_at - nxt), stop_at,
                                       padding_bytes=stop_at - nxt)
                    pos = stop_at
                    continue
                q = resync(fd, nxt + 1, stop_at, phys0, size)
                gap_end = q if q is not None else stop_at
                if fr.kind == "zero" and q is None and _all_zero(fd, nxt, stop_at):
                    # A sealed file's never-written tail (no blank record was needed or written).
                    yield DecodeResult(padding_batch(SOURCE_FORMAT, seg, nxt, stop_at - nxt), stop_at,
                                       padding_bytes=stop_at - nxt)
                else:
                    tail = (f"{gap_end - nxt} bytes skipped to the next valid record at {q}" if q is not None
                            else f"no valid record follows: the remaining {gap_end - nxt} bytes are quarantined")
                    yield from quarantine_range(SOURCE_FORMAT, seg, fd, nxt, gap_end, f"{fr.why} at {nxt}; {tail}",
                                                self.chunk_bytes)
                pos = gap_end
            if end > stop_at:
                yield shrink_loss(SOURCE_FORMAT, seg, stop_at, end)
        finally:
            self._unmap()
            os.close(fd)

    def _frame(self, data, segment: str, base: int, hard_end: int, phys_base: int, file_end: int) -> Framing:
        """:func:`walk` of a chunk read for decoding (from file position ``base`` of ``segment``); the
        native core decodes each record as it walks it (while its bytes are in cache), the Python
        path decodes after the walk."""
        if self._core is None:
            return walk(data, 0, len(data), hard_end, phys_base, file_end)
        at, records, stop, kind, why, need, rows, outer, nbytes, reasons = self._core.rmq_chunk(
            data, 0, len(data), hard_end, phys_base, file_end, base,
            _chunk_constants(segment), _CODEC_LIST, self.verify_crc, self.decompress, self.delay_levels.tolist(),
            *_NATIVE_RULES,
            NV.layout(self._core, SOURCE_SCHEMA))
        return Framing(None, None, stop, kind, why, need, records=records, core_numbers=at,
                       decoded=_CoreRows(NV.arrow_as(rows, SOURCE_SCHEMA), outer, nbytes, reasons))

    def _records(self, buf: np.ndarray, base: int, fr: Framing, seg: SegmentInfo, qb: QuarantineBuilder):
        """Decode the framed records of ``buf`` (file bytes from ``base``); bad ones go to ``qb``."""
        n = fr.records
        if n == 0:
            return None, 0
        if seg.problem is not None:
            for a, ln in zip(fr.positions.tolist(), fr.lengths.tolist()):
                qb.add(base + a, buf[a : a + ln].tobytes(), seg.problem)
            return None, 0
        if self._core is not None:
            core = fr.decoded
            if not core.reasons and core.rows.num_rows and not (
                    self.decompress and core.rows.column(_COMPRESSION).null_count < core.rows.num_rows):
                return core.rows, core.nbytes  # the usual chunk: every row kept as made (every body inflated)
            d = _native_decoded(core, n)
        else:
            msg = _python_messages(buf, fr.positions, fr.lengths, self.verify_crc, self._message_rows)
            d = _Decoded(msg.r, msg.o, msg.length, msg.sysflag,
                         {**self._record_columns(msg, base, seg), **self._property_columns(msg)})
        r, o, m = d.r, d.o, len(d.o)
        columns = d.columns
        # A body still compressed is one the native core left (it inflates only whole, checked
        # streams) or, on the Python path, every compressed one: its compression is named.
        compression = (columns["compression"] if columns is not None else d.batch.column(_COMPRESSION))
        if self.decompress and compression.null_count < m:
            if columns is None:
                columns = NV.columns(d.batch)
            body = columns["body"]
            where = np.flatnonzero(pc.is_valid(compression).to_numpy(zero_copy_only=False))
            plain = []
            for j in where.tolist():
                try:
                    plain.append(_decompress(body[j].as_py(), compression[j].as_py()))
                except (zlib.error, ValueError, cramjam.DecompressionError) as e:
                    plain.append(b"")
                    r.fail(np.arange(n) == o[j], f"body does not decompress as {compression[j].as_py()}: {e}")
            body = pc.coalesce(scatter(pa.array(plain, pa.binary()), where, m), body)
            columns = {**columns, "body": body, "bodySize": pc.binary_length(body),  # int32, as the schema's
                       "compression": pa.nulls(m, pa.string())}

        p, tot = fr.positions, fr.lengths
        for i in np.flatnonzero(~r.ok).tolist():
            a = int(p[i])
            qb.add(base + a, buf[a : a + int(tot[i])].tobytes(), str(r.reason[i]))
        keep = r.ok[o]
        if not keep.any():
            return None, 0
        batch = source_batch(columns, m) if columns is not None else d.batch
        if not keep.all():
            batch = batch.filter(pa.array(keep))
        return batch, int(d.length[keep].sum())

    @staticmethod
    def _record_columns(msg: _Messages, base: int, seg: SegmentInfo) -> dict[str, pa.Array]:
        """The unified schema's columns of the records' own fields and the chunk's constants
        (``base``: the chunk's file position in ``seg``)."""
        m = len(msg.o)
        compressed = (msg.sysflag & L.COMPRESSED_FLAG) != 0
        return {
            **constant_columns(_chunk_constants(seg.segment), m),
            "compression": (pa.array(np.where(compressed, _CODEC_NAMES[(msg.sysflag >> 8) & 7], None), pa.string())
                            if compressed.any() else pa.nulls(m, pa.string())),
            "topic": msg.topic,
            "partition": pa.array(msg.queue_id.astype(np.int32)),
            "segmentPosition": pa.array(base + msg.pos),
            "queueOffset": pa.array(msg.queue_offset),
            "physicalOffset": pa.array(msg.physical_offset),
            "messageId": msg.message_id,
            "producerUniqueId": msg.props.first("UNIQ_KEY"),
            "bornTimestamp": _timestamps(msg.born_ms),
            "bornHost": msg.born_host,
            "storeTimestamp": _timestamps(msg.store_ms),
            "storeHost": msg.store_host,
            "deliveryCount": pa.array(msg.reconsume.astype(np.int32)),
            "flag": pa.array(msg.flag.astype(np.int32)),
            "sysFlag": pa.array(msg.sysflag.astype(np.int32)),
            "bodyCrc": pa.array(msg.crc.astype(np.int32)),
            "preparedTransactionOffset": pa.array(msg.prepared),
            "body": msg.body,
            "bodySize": pc.binary_length(msg.body),  # int32, as the schema's bodySize
            "recordLength": pa.array(msg.length),
        }

    def _property_columns(self, msg: _Messages) -> dict[str, pa.Array]:
        """Columns from the properties, SYSFLAG, BORNTIMESTAMP and topic of each row (Arrow kernels)."""
        props, msf = msg.props, msg.sysflag
        get = props.get
        headers, user = props.maps()
        delay_level = _int_values(get("DELAY"))
        levels = self.delay_levels
        lv = pc.fill_null(delay_level, 0).to_numpy()
        level_ms = pa.array(levels[np.clip(lv, 1, len(levels)) - 1], mask=lv <= 0)
        timer_ms = _int_values(get("TIMER_DELAY_MS"))
        timer_sec = pc.multiply(_int_values(get("TIMER_DELAY_SEC"), 12), 1000)
        has_delay_level = pc.is_valid(get("DELAY"))
        deliver_ms = pc.if_else(has_delay_level, pa.scalar(None, pa.int64()), _int_values(get("TIMER_DELIVER_MS")))
        ttl = _int_values(get("TTL"))
        ttl = pc.if_else(pc.greater(ttl, 0), ttl, pa.scalar(None, pa.int64()))
        tran = pc.equal(get("TRAN_MSG"), "true")
        is_delay = pc.or_(pc.or_(has_delay_level, pc.is_valid(get("TIMER_DELIVER_MS"))),
                          pc.or_(pc.is_valid(get("TIMER_DELAY_SEC")), pc.is_valid(get("TIMER_DELAY_MS"))))
        message_type = pc.case_when(
            pc.make_struct(pc.fill_null(tran, False), is_delay, pc.is_valid(get("__SHARDINGKEY"))),
            "TRANSACTION", "DELAY", "FIFO", "NORMAL",
        )
        txn_bits = msf & L.TRANSACTION_MASK
        uniq = get("UNIQ_KEY")
        topics = msg.topic.dictionary_encode()
        is_system = np.array([L.is_system_topic(t) for t in topics.dictionary.to_pylist()], np.bool_)
        return {
            "uniqueId": uniq,
            "delayTime": pc.coalesce(level_ms, timer_ms, timer_sec),
            "startDeliverTime": _timestamps(deliver_ms),
            "expireTime": _timestamps(pc.add(pa.array(msg.born_ms), ttl)),
            "traceId": get("TRACE_CONTEXT"),
            "transactionId": pc.coalesce(get("__transactionId__"), pc.if_else(
                pc.or_(pc.fill_null(tran, False), pa.array(txn_bits != 0)), uniq, pa.scalar(None, pa.string()))),
            "correlationId": get("CORRELATION_ID"),
            "messageKey": get("__SHARDINGKEY"),
            "tags": get("TAGS"),
            "keys": _split_keys(get("KEYS")),
            "messageType": message_type,
            "systemCopy": pa.array(is_system[topics.indices.to_numpy(zero_copy_only=False)]),
            "transactionState": pa.array(
                np.array([None, "PREPARED", "COMMIT", "ROLLBACK"], dtype=object)[txn_bits >> 2], pa.string()),
            "properties": user,
            "headers": headers,
        }

    def _message_rows(self, buf, p, tot, sysflag, body_at, blen, pl_at, plen, crc, r: _Reasons) -> _Rows:
        """One row per message of the good records; inner batches unwrapped into their messages."""
        unwrap = r.ok & ((sysflag & L.NEED_UNWRAP_FLAG) != 0)
        plain = np.flatnonzero(r.ok & ~unwrap)
        cols = {
            "outer": [plain], "pos": [p[plain]], "body_a": [body_at[plain]], "body_b": [(body_at + blen)[plain]],
            "props_a": [pl_at[plain] + 2], "props_b": [(pl_at + 2 + plen)[plain]], "flag": [be_int(buf, p + 16, 4)[plain]],
            "crc": [crc[plain]], "length": [tot[plain]], "index": [np.zeros(len(plain), np.int64)],
        }
        for i in np.flatnonzero(unwrap).tolist():
            if sysflag[i] & L.COMPRESSED_FLAG:
                r.fail(np.arange(len(p)) == i, "compressed inner batch (batches are never compressed)")
                continue
            try:
                inner = _unwrap(buf, int(body_at[i]), int(body_at[i] + blen[i]))
            except ValueError as e:
                r.fail(np.arange(len(p)) == i, str(e))
                continue
            k = len(inner)
            arr = np.asarray(inner, np.int64)
            cols["outer"].append(np.full(k, i))
            cols["pos"].append(arr[:, 0])
            cols["flag"].append(arr[:, 1])
            cols["crc"].append(arr[:, 2])
            cols["body_a"].append(arr[:, 3])
            cols["body_b"].append(arr[:, 4])
            cols["props_a"].append(arr[:, 5])
            cols["props_b"].append(arr[:, 6])
            # The record's bytes are accounted on its first message, so totals still add up.
            cols["length"].append(np.r_[tot[i], np.zeros(k - 1, np.int64)])
            cols["index"].append(np.arange(k))
        merged = {k: np.concatenate(v).astype(np.int64) for k, v in cols.items()}
        order = np.argsort(merged["pos"], kind="stable")
        return _Rows(**{k: v[order] for k, v in merged.items()})


def _looks_whole(fd: int, position: int, length: int, verify_crc: bool) -> bool:
    """Whether the last record of the file being written is whole, not still being copied in.

    The broker copies a record into a zero-filled file front to back, so a record read
    mid-copy ends in zeros; a whole one never does (it ends with the 0x02 closing its
    properties, or with a topic byte and a zero properties length). Its body CRC must
    also check, when CRCs are checked.
    """
    data = os.pread(fd, length, position)
    if len(data) < length or data[-3:] == b"\0\0\0":
        return False
    if not verify_crc:
        return True
    buf = np.frombuffer(data, np.uint8)
    sysflag = int(be_int(buf, np.array([36]), 4)[0])
    body_at = L.BORN_HOST_AT + (20 if sysflag & L.BORNHOST_V6_FLAG else 8) + 8 + (20 if sysflag & L.STOREHOST_V6_FLAG else 8) + 16
    (blen,) = struct.unpack_from(">i", data, body_at - 4)
    (stored,) = struct.unpack_from(">i", data, 8)
    return zlib.crc32(data[body_at : body_at + blen]) & 0x7FFFFFFF == stored


def _zeros(data: bytes) -> bool:
    """True when every byte is zero (eight at a time with NumPy: a bytes search crawls here)."""
    whole = len(data) // 8 * 8
    return not np.frombuffer(data, np.uint64, whole // 8).any() and not data[whole:].strip(b"\0")


def _skip_hole(fd: int, pos: int, stop: int) -> int:
    """``pos``, or if it is in a hole of a sparse file (zeros never written), where data
    starts again; ``stop`` when no data follows before it. A pre-sized CommitLog file is
    mostly hole until written, and reading its zeros costs more than the whole walk."""
    if _SEEK_DATA is None:
        return pos
    try:
        return min(max(pos, os.lseek(fd, pos, _SEEK_DATA)), stop)
    except OSError as e:
        return stop if e.errno == errno.ENXIO else pos  # ENXIO: only hole up to the end of the file


_SEEK_DATA = getattr(os, "SEEK_DATA", None)


def _all_zero(fd: int, a: int, b: int) -> bool:
    pos = a
    while pos < b:
        pos = _skip_hole(fd, pos, b)
        if pos >= b:
            break
        data = os.pread(fd, min(b - pos, RESYNC_WINDOW), pos)
        if not data or not _zeros(data):
            return bool(not data)
        pos += len(data)
    return True


def _looks_like_commitlog(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(8)
    return len(head) == 8 and struct.unpack(">i", head[4:])[0] in (L.MAGIC_V1, L.MAGIC_V2, L.MAGIC_BLANK)

