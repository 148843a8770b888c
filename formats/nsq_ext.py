"""NSQ (youzan) extended-message disk-queue segments -> unified schema (spec: nsq-ext-segment.md).

Layout of one record::

    size:int32be  ts:int64be attempts:uint16be id:uint64be trace:uint64be [ext] body
    ext := ver:uint8 [len:uint16be data[len]]     # when (attempts & 0xF000) == 0xA000;
                                                  # len+data only when ver != 0

Framing (the chain of length prefixes) is walked record by record, as it must be; every
field is then read for all records of a chunk at once with NumPy. JSON headers are read
for the whole chunk at once with NumPy when they are all simple, else parsed one by one
(orjson, mapped over the chunk in one call), and turned into columns for the whole chunk
(:mod:`msglake.formats.nsq_headers`); version-2 tags are checked with Arrow kernels.

When the native core is installed (:mod:`msglake.formats.native`, built from ``native/``),
the walk, the fixed fields and their checks, simple headers and their columns, and the
bodies come from it; the steps here stay the reference it is tested against.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from msglake.formats.base import (
    DecodeResult,
    QuarantineBuilder,
    ScanResult,
    SegmentInfo,
    be_uint,
    binary_array,
    concat_batches,
    Constants,
    constant_columns,
    gather_slices,
    quarantine_range,
    scatter,
    shrink_loss,
    source_batch,
)
from msglake.formats import nsq_headers as H
from msglake.formats import nsq_layout as L
from msglake.formats import native as NV
from msglake.formats.native import NativeCodec
from msglake.formats.options import CodecOptions, HostPort
from msglake.schemas.messages import DEFAULT_PRIORITY, TS
from msglake.schemas.source import SOURCE_SCHEMA

NAME = "nsq-ext"
SOURCE_FORMAT = "nsq_ext"

HEADER_SIZE = 26  # minValidMsgLength: ts 8 + attempts 2 + id 8 + trace 8
MAX_POSSIBLE_MSG_SIZE = 1 << 28  # the reader's upper bound for a length prefix
MAX_ATTEMPTS = 4000
EXT_FLAG = 0xA000
NO_EXT_VER, TAG_EXT_VER, JSON_HEADER_EXT_VER = 0, 2, 4
#: Bytes decoded per step; bounds memory whatever the backlog. A chunk and the columns made of
#: it should stay in cache while the previous chunk's columns are still held (as a Spark task
#: holds them): native passes of the suite's 1M set took 0.39-0.45 s with 2 MiB chunks and
#: 0.45-0.51 s with 4 MiB, alternated four times; 1 MiB and less paid more in per-chunk steps.
CHUNK_BYTES = 2 << 20

_LEN = struct.Struct(">i")


# ----------------------------------------------------------------------------- framing


@dataclass
class Framing:
    """Records found in a buffer: start positions (of the length prefix) and lengths."""

    positions: np.ndarray
    lengths: np.ndarray  # message bytes, without the 4-byte prefix
    stop: int  # first position not covered by a complete record
    #: "end" (range fully framed), "incomplete" (a record runs past the range end),
    #: or "broken" (a length prefix that no writer produces: framing is lost here).
    stop_kind: str
    bad_length: int = 0


def frame(buf, start: int, end: int, core=None) -> Framing:
    """Walk the length prefixes of ``buf[start:end]`` (with the native ``core`` when given).

    Examples
    --------
    >>> fr = frame(b"\\x00\\x00\\x00\\x01X\\x00\\x00", 0, 7)
    >>> fr.positions.tolist(), fr.stop, fr.stop_kind
    ([0], 5, 'incomplete')
    """
    if core is not None:
        at, pos, kind, bad = core.nsq_frame(buf, start, end)
        return _framing(NV.numbers(NV.arrow_as(at, NV.POSITIONS), 0), pos, kind, bad)
    positions: list[int] = []
    append = positions.append
    unpack = _LEN.unpack_from
    pos, last = start, end - 4
    kind, bad = "end", 0
    # The fewest Python steps per record: the one hot loop of the decoder.
    while pos <= last:
        n = unpack(buf, pos)[0]
        nxt = pos + 4 + n
        if 0 < n <= MAX_POSSIBLE_MSG_SIZE and nxt <= end:
            append(pos)
            pos = nxt
            continue
        kind, bad = ("broken", n) if n <= 0 or n > MAX_POSSIBLE_MSG_SIZE else ("incomplete", n)
        break
    else:
        if pos < end:  # a cut length prefix
            kind = "incomplete"
    return _framing(np.asarray(positions, np.int64), pos, kind, bad)


#: What the native core needs of :func:`msglake.formats.nsq_headers.is_user_property`.
_NOT_PROPERTIES = (sorted(H.COLUMN_HEADERS), list(H.RESERVED_PREFIXES))


#: What a record's headers leave null is the schema's default.
_HEADER_DEFAULTS = {"priority": DEFAULT_PRIORITY, "durability": 0}


def _segment_constants(seg: SegmentInfo | None, store_host: str | None) -> Constants:
    """The columns of one value on every row decoded from ``seg``."""
    topic, partition, name = (seg.topic, seg.partition, seg.segment) if seg else (None, None, None)
    return ([("topic", topic), ("sourceFormat", SOURCE_FORMAT), ("segment", name), ("storeHost", store_host)],
            [("partition", partition)])


def frame_chunk(buf, core=None, seg: SegmentInfo | None = None, store_host: str | None = None,
                base: int = 0) -> tuple[Framing, pa.RecordBatch | None]:
    """:func:`frame` of a whole chunk (from file position ``base`` of ``seg``); with the native
    ``core``, also the chunk's rows when every record in it is plain (decoded in the same pass, see
    ``native/src/nsq/chunk.rs``), else None: a source batch (``SOURCE_SCHEMA``) whose columns an
    NSQ record does not fill are null (the constant ones of ``seg`` and ``store_host`` filled)."""
    if core is None:
        return frame(buf, 0, len(buf)), None
    rows_at = (base, seg.start_virtual if seg else None, (_HEADER_DEFAULTS["priority"], _HEADER_DEFAULTS["durability"]),
               _segment_constants(seg, store_host))
    at, pos, kind, bad, plain = core.nsq_chunk(buf, 0, len(buf), *_NOT_PROPERTIES, rows_at,
                                               NV.layout(core, SOURCE_SCHEMA))
    return (_framing(NV.numbers(NV.arrow_as(at, NV.POSITIONS), 0), pos, kind, bad),
            None if plain is None else NV.arrow_as(plain, SOURCE_SCHEMA))


def _framing(at: np.ndarray, pos: int, kind: str, bad: int) -> Framing:
    # What np.diff(at, append=pos) - 4 gives, without its concatenation: a few microseconds,
    # where np.diff took about 20 for each of a trigger's many small tails.
    lengths = np.empty(len(at), np.int64)
    if len(at):
        np.subtract(at[1:], at[:-1], out=lengths[:-1])
        lengths[-1] = pos - at[-1]
        lengths -= 4
    return Framing(at, lengths, pos, kind, bad)


def last_boundary(path: str, start: int, end: int, core=None, window: int = CHUNK_BYTES) -> tuple[int, str]:
    """Position after the last complete record in ``[start, end)`` of a file, and why it stopped."""
    if end <= start:
        return start, "end"
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = _Boundaries(fd, start, end, core, window)
        for _ in walk:
            pass
        return walk.stop, walk.kind
    finally:
        os.close(fd)


class _Boundaries:
    """Where the records of ``[start, end)`` of an open file end: the planning walks' one reader.

    The file is read ``window`` bytes at a time with ``os.pread`` and each window framed
    (:func:`frame`). Not mapped: a live segment can shrink (a youzan nsqd rolls back
    uncommitted writes), and touching a mapped page past the new end of the file kills the
    process with SIGBUS. Iterating yields each window's record ends (ascending absolute
    positions, int64); afterwards ``stop`` is the position after the last whole record and
    ``kind`` why the walk stopped there: "end", "incomplete" (a record or its length prefix
    runs past the end) or "broken" (a length prefix no writer produces). A file shorter than
    ``end`` ends where it does; the body of a record longer than a window is not read.
    """

    def __init__(self, fd: int, start: int, end: int, core=None, window: int = CHUNK_BYTES):
        self.fd, self.end, self.core, self.window = fd, end, core, max(window, 4)
        self.stop, self.kind = start, "end"

    def __iter__(self) -> Iterator[np.ndarray]:
        pos = self.stop
        while pos + 4 <= self.end:
            want = min(self.end - pos, self.window)
            buf = os.pread(self.fd, want, pos)
            if len(buf) < want:
                self.end = pos + len(buf)  # the file shrank under the walk
            fr = frame(buf, 0, len(buf), self.core)
            if len(fr.positions):
                yield fr.positions + fr.lengths + (pos + 4)
            pos = self.stop = pos + fr.stop
            if fr.stop_kind == "broken":
                self.kind = "broken"
                return
            if fr.stop_kind == "incomplete" and fr.stop == 0 and pos + 4 <= self.end:
                # One record longer than the window: its length prefix says where it ends.
                nxt = pos + 4 + _LEN.unpack_from(buf, 0)[0]
                if nxt > self.end:
                    break
                yield np.array([nxt], np.int64)
                pos = self.stop = nxt
        if pos < self.end:  # a record or a cut length prefix runs past the end
            self.kind = "incomplete"


# ----------------------------------------------------------------------------- decode


@dataclass
class _Fields:
    """Fixed header and ext block of every record of a chunk, and which records fail a check."""

    ok: np.ndarray
    reason: np.ndarray  # object: the first failed check's words, None where ok
    ts_ns: np.ndarray
    attempts: np.ndarray
    msg_id: np.ndarray
    trace: np.ndarray
    ver: np.ndarray  # -1 without an ext block
    has_len: np.ndarray  # the ext version has a length and data
    ext_start: np.ndarray
    ext_len: np.ndarray
    body_start: np.ndarray


def _native_fields(buf: np.ndarray, pos: np.ndarray, n: np.ndarray, core) -> _Fields:
    """:func:`_python_fields` by the native core, in one pass over the records."""
    fields, reasons = core.nsq_fields(buf, pos, n)
    d = NV.arrow(fields)
    ok = NV.numbers(d, "ok")  # a new array: written below
    reason = np.full(len(pos), None, dtype=object)
    for i, why in reasons:
        reason[i] = why
    ver = NV.numbers(d, "ver").astype(np.int64)
    ext_start, ext_end = NV.numbers(d, "ext_start"), NV.numbers(d, "ext_end")
    return _Fields(ok, reason, NV.numbers(d, "ts_ns"), NV.numbers(d, "attempts"), NV.numbers(d, "msg_id"),
                   NV.numbers(d, "trace"), ver, ok & (ver > NO_EXT_VER), ext_start, ext_end - ext_start,
                   NV.numbers(d, "body_start"))


def _python_fields(buf: np.ndarray, pos: np.ndarray, n: np.ndarray, core=None) -> _Fields:
    """Every field of the fixed header and the ext block, for all records at once (NumPy)."""
    s = pos + 4  # message start
    ok = n >= HEADER_SIZE
    reason = np.full(len(pos), None, dtype=object)
    reason[~ok] = [f"record length {v} is below the {HEADER_SIZE}-byte minimum" for v in n[~ok]]

    # The fixed header, for every record at once (short records read garbage, masked by ok).
    ts_ns = be_uint(buf, s, 8).astype(np.int64)  # signed int64 on disk
    raw_attempts = be_uint(buf, s + 8, 2)
    msg_id = be_uint(buf, s + 10, 8)
    trace = be_uint(buf, s + 18, 8)

    high = raw_attempts & 0xF000
    is_ext = high == EXT_FLAG
    reserved = ok & (raw_attempts > MAX_ATTEMPTS) & (high != 0) & ~is_ext
    reason[reserved] = [f"attempts field 0x{v:04x} has a reserved high nibble" for v in raw_attempts[reserved]]
    ok &= ~reserved
    attempts = np.where(raw_attempts > MAX_ATTEMPTS, raw_attempts & 0x0FFF, raw_attempts)

    ext = ok & is_ext
    no_ver = ext & (n < HEADER_SIZE + 1)
    reason[no_ver] = "ext flag set but the record ends before the ext version byte"
    ok &= ~no_ver
    ext &= ok
    ver = np.where(ext, buf[np.minimum(s + HEADER_SIZE, len(buf) - 1)], -1).astype(np.int64)
    bad_ver = ext & (ver != NO_EXT_VER) & (ver != TAG_EXT_VER) & (ver != JSON_HEADER_EXT_VER)
    reason[bad_ver] = [f"unknown ext version {v}" for v in ver[bad_ver]]
    ok &= ~bad_ver
    has_len = ok & ext & (ver != NO_EXT_VER)
    short_len = has_len & (n < HEADER_SIZE + 3)
    reason[short_len] = "record ends inside the ext length field"
    ok &= ~short_len
    has_len &= ok
    ext_len = np.where(has_len, be_uint(buf, s + HEADER_SIZE + 1, 2), 0)
    past = has_len & (HEADER_SIZE + 3 + ext_len > n)
    reason[past] = [f"ext length {e} runs past the record end ({r} bytes)" for e, r in zip(ext_len[past], n[past])]
    ok &= ~past
    has_len &= ok

    ext_start = s + HEADER_SIZE + 3
    body_start = np.where(has_len, ext_start + ext_len, np.where(ok & ext, s + HEADER_SIZE + 1, s + HEADER_SIZE))

    return _Fields(ok, reason, ts_ns, attempts, msg_id, trace, np.where(ext, ver, -1), has_len, ext_start,
                   ext_len, body_start)


def _gather_binary(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, core=None) -> pa.Array:
    """``buf[starts[i]:ends[i]]`` for every i as an Arrow binary array (one copy of the bytes
    taken): :func:`msglake.formats.base.gather_slices`, or the native ``core``'s."""
    if core is None:
        return binary_array(*gather_slices(buf, starts, ends))
    return NV.arrow(core.gather(buf, starts.astype(np.int64), ends.astype(np.int64))).column("values")


def _native_scanner(core):
    """:func:`msglake.formats.nsq_json.scan` by the native core: the same pairs, or None."""
    def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> H.Pairs | None:
        found = core.nsq_scan_headers(buf, starts.astype(np.int64), ends.astype(np.int64))
        if found is None:
            return None
        counts, names, pairs = found
        p = NV.arrow(pairs)
        return H.Pairs(NV.numbers(NV.arrow(counts), "counts"), names, NV.numbers(p, "code"), NV.numbers(p, "is_int"),
                       p.column("text"))
    return scan


@dataclass
class ChunkDecode:
    """Decoded records of one chunk, before they become an Arrow batch."""

    batch: pa.RecordBatch | None
    decoded_bytes: int


def decode_chunk(
    buf: np.ndarray,
    base: int,
    fr: Framing,
    seg: SegmentInfo,
    store_host: str | None,
    quarantine: QuarantineBuilder,
    core=None,
    plain: pa.RecordBatch | None = None,
) -> ChunkDecode:
    """Decode the framed records of ``buf`` (file bytes starting at file position ``base``).

    ``plain``: the rows the native core made in its framing pass (:func:`frame_chunk`), when
    every record of the chunk is plain; else the records are decoded here step by step.
    """
    pos, n = fr.positions, fr.lengths
    if len(pos) == 0:
        return ChunkDecode(None, 0)
    if seg.problem is not None:
        for p, ln in zip(pos.tolist(), n.tolist()):
            quarantine.add(base + p, buf[p : p + 4 + ln].tobytes(), seg.problem)
        return ChunkDecode(None, 0)
    if plain is not None:
        return ChunkDecode(plain, int((n + 4).sum()))

    rec_end = pos + 4 + n
    f = (_python_fields if core is None else _native_fields)(buf, pos, n, core)
    ok, reason, ver, has_len, ext_start, ext_len = f.ok, f.reason, f.ver, f.has_len, f.ext_start, f.ext_len
    ts_ns, attempts, msg_id, trace, body_start = f.ts_ns, f.attempts, f.msg_id, f.trace, f.body_start

    # Ext data: JSON headers (version 4) and tags (version 2), parsed where present.
    with_ext = np.flatnonzero(has_len)
    json_rows = with_ext[ver[with_ext] == JSON_HEADER_EXT_VER]
    # Simple headers (the usual ones) are read without Python objects (NumPy, or the native
    # core); any other chunk with orjson.
    scanned = H.scan_headers(buf, ext_start[json_rows], (ext_start + ext_len)[json_rows],
                             None if core is None else _native_scanner(core))
    if scanned is not None:
        docs, accepted, refused = scanned
    else:
        # The file bytes as a bytes object (the one the chunk was read into, when it is that one).
        raw = buf.base if isinstance(buf.base, bytes) and len(buf.base) == len(buf) else buf.tobytes()
        a, b = ext_start[json_rows].tolist(), (ext_start + ext_len)[json_rows].tolist()
        docs, accepted, refused = H.load_headers(list(map(raw.__getitem__, map(slice, a, b))))
    for j, why in refused.items():
        reason[json_rows[j]] = why
    ok[json_rows[list(refused)]] = False
    doc_rows = json_rows[accepted]
    tag_rows = with_ext[ver[with_ext] == TAG_EXT_VER]
    tags_v2 = _gather_binary(buf, ext_start[tag_rows], (ext_start + ext_len)[tag_rows], core)
    try:
        tags_v2 = tags_v2.cast(pa.string())
    except pa.ArrowInvalid:  # some tag is not UTF-8: find which, record by record
        texts = []
        for j, data in enumerate(tags_v2.to_pylist()):
            try:
                texts.append(data.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)
                reason[tag_rows[j]] = "version-2 tag is not UTF-8"
                ok[tag_rows[j]] = False
        tags_v2 = pa.array(texts, pa.string())
        tag_rows = tag_rows[pc.is_valid(tags_v2).to_numpy(zero_copy_only=False)]
        tags_v2 = tags_v2.drop_null()
    tags_v2 = pc.if_else(pc.equal(pc.binary_length(tags_v2), 0), pa.scalar(None, pa.string()), tags_v2)

    for i in np.flatnonzero(~ok).tolist():
        p = int(pos[i])
        quarantine.add(base + p, buf[p : p + 4 + int(n[i])].tobytes(), str(reason[i]))

    rows = np.flatnonzero(ok)
    m = len(rows)
    if m == 0:
        return ChunkDecode(None, 0)
    # Where, among the decoded rows, the headers and tags sit.
    row_index = np.full(len(pos), -1, np.int64)
    row_index[rows] = np.arange(m)
    doc_where = row_index[np.asarray(doc_rows, np.int64)]
    tag_where = row_index[np.asarray(tag_rows, np.int64)]

    columns = H.header_columns(docs, doc_where, m, core)
    # traceId: the header's (traceId, else ##trace_id), else the record's trace half when set.
    trace_rows = trace[rows]
    columns["traceId"] = pc.coalesce(
        columns["traceId"], pa.array(trace_rows, pa.uint64(), mask=trace_rows == 0).cast(pa.string())
    )
    columns["tags"] = pc.coalesce(columns["tags"], scatter(tags_v2, tag_where, m))

    body = _gather_binary(buf, body_start[rows], rec_end[rows], core)
    batch = _batch(columns, seg, store_host, base + pos[rows], n[rows] + 4,
                   pa.array(msg_id[rows], pa.uint64()).cast(pa.string()), ts_ns[rows] // 1000,
                   attempts[rows].astype(np.int32), body)
    return ChunkDecode(batch, int((n[rows] + 4).sum()))


def _batch(columns: dict[str, pa.Array], seg: SegmentInfo, store_host: str | None, positions: np.ndarray,
           record_lengths: np.ndarray, message_id: pa.Array, store_us: np.ndarray, attempts: np.ndarray,
           body: pa.Array) -> pa.RecordBatch:
    """The source batch of decoded records: their header columns and the record's own fields."""
    m = len(positions)
    for name, default in _HEADER_DEFAULTS.items():
        columns[name] = pc.fill_null(columns[name], default)
    columns.update(
        {
            **constant_columns(_segment_constants(seg, store_host), m),
            "segmentPosition": pa.array(positions),
            "queueOffset": pa.array(positions + seg.start_virtual)
            if seg.start_virtual is not None
            else pa.nulls(m, pa.int64()),
            "messageId": message_id,
            "storeTimestamp": pa.array(store_us, pa.int64()).cast(TS),
            "deliveryCount": pa.array(attempts),
            "body": body,
            "bodySize": pc.binary_length(body),  # int32, as the schema's bodySize
            "recordLength": pa.array(record_lengths),
            "systemCopy": pa.array(np.zeros(m, np.bool_)),  # NSQ keeps no internal copies
        }
    )
    return source_batch(columns, m)


class NsqExtOptions(CodecOptions):
    """Options of the ``nsq-ext`` format."""

    #: Value of ``storeHost`` for every row: nsqd's segments do not record the broker's address.
    storeHost: HostPort | None = None


class NsqExtCodec(NativeCodec):
    """The ``nsq-ext`` format: scan a data path of topic folders and decode their segments.

    Parameters
    ----------
    options : NsqExtOptions, optional
        The format's options; or give them as keywords (``NsqExtCodec(storeHost="10.0.0.5:4150")``).
    chunk_bytes : int
        Bytes decoded per step.
    """

    name = NAME
    source_format = SOURCE_FORMAT
    Options = NsqExtOptions

    def __init__(self, options: NsqExtOptions | None = None, /, *, chunk_bytes: int = CHUNK_BYTES, **fields):
        self.options = options if options is not None else NsqExtOptions(**fields)
        self.store_host = self.options.storeHost
        self.chunk_bytes = chunk_bytes
        self._native = self.options.native
        self._attach_core()
        # path -> (size walked, boundary found): segments without a writer meta are walked
        # once, then only their new bytes.
        self._walked: dict[str, tuple[int, int, str]] = {}

    # ---------------------------------------------------------------- scan (driver side)

    def scan(self, root: str) -> ScanResult:
        """Find every segment under ``root`` (``<root>/<topic>/<topic>-<part>.diskqueue.N.dat``)."""
        result = ScanResult()
        if not os.path.isdir(root):
            raise FileNotFoundError(f"nsq-ext source path {root!r} is not a directory")
        for topic_dir in sorted(os.scandir(root), key=lambda e: e.name):
            if not topic_dir.is_dir():
                if topic_dir.is_file():
                    result.ignore(topic_dir.name, "not in a topic folder", topic_dir.stat().st_size)
                continue
            self._scan_topic(root, topic_dir.name, result)
        return result

    def _scan_topic(self, root: str, folder: str, result: ScanResult) -> None:
        topic_path = os.path.join(root, folder)
        queues: dict[int, list[tuple[int, os.DirEntry]]] = {}
        for entry in sorted(os.scandir(topic_path), key=lambda e: e.name):
            rel = f"{folder}/{entry.name}"
            if entry.is_dir():
                result.ignore_tree(entry.path, rel, "in a folder nested in a topic folder (nsqd writes none)")
                continue
            if not entry.is_file():
                continue
            why = L.classify(entry.name)
            if why is not None:
                continue
            m = L.SEGMENT_RE.match(entry.name)
            if m is None:
                if ".diskqueue." in entry.name and entry.name.endswith(".dat"):
                    size = entry.stat().st_size
                    result.segments.append(
                        SegmentInfo(rel, entry.name, None, None, size, True, None, size,
                                    problem=f"segment file name {entry.name!r} does not parse", whole_file=True)
                    )
                else:
                    result.ignore(rel, "not an NSQ disk-queue file", entry.stat().st_size)
                continue
            if m["topic"] != folder:
                problem = f"queue {m['topic']!r} of file {entry.name!r} does not belong to topic folder {folder!r}"
                size = entry.stat().st_size
                result.segments.append(
                    SegmentInfo(rel, entry.name, folder, int(m["partition"]), size, True, None, size,
                                file_num=int(m["num"]), problem=problem)
                )
                continue
            queues.setdefault(int(m["partition"]), []).append((int(m["num"]), entry))
        bad_topic = None if L.TOPIC_RE.match(folder) else f"topic folder name {folder!r} is not a valid NSQ topic name"
        for partition, files in sorted(queues.items()):
            self._scan_queue(topic_path, folder, partition, sorted(files), bad_topic, result)

    def _scan_queue(self, topic_path, topic, partition, files, problem, result: ScanResult) -> None:
        queue = L.queue_name(topic, partition)
        meta = None
        meta_path = L.writer_meta_path(topic_path, queue)
        for candidate in (meta_path, meta_path + ".tmp"):
            raw = L.read_small(candidate)
            if raw is None:
                continue
            try:
                meta = L.parse_writer_meta(raw)
                break
            except (ValueError, UnicodeDecodeError) as e:
                result.notes.append(f"{topic}/{os.path.basename(candidate)}: unreadable writer meta ({e})")
        if meta is None:
            result.notes.append(
                f"{topic}/{queue}: no writer meta; reading to the last complete record of each segment"
            )
        extra = None
        raw = L.read_small(os.path.join(topic_path, f"{queue}.diskqueue.meta.extra.dat"))
        if raw is not None:
            try:
                extra = L.parse_extra_meta(raw)
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                result.notes.append(f"{topic}/{queue}: unreadable meta.extra.dat, ignored")
        prev_end_virtual = None
        last_num = files[-1][0]
        for num, entry in files:
            rel = f"{topic}/{entry.name}"
            size = entry.stat().st_size
            om = None
            raw = L.read_small(entry.path + ".offsetmeta.dat")
            if raw is not None:
                try:
                    om = L.parse_offset_meta(raw)
                except ValueError:
                    result.notes.append(f"{rel}: unreadable offsetmeta, ignored")
            start_virtual = None
            if om is not None:
                start_virtual = om.start_virtual
            elif meta is not None and num == meta.file_num:
                start_virtual = meta.virtual_end - meta.pos
            elif prev_end_virtual is not None:
                start_virtual = prev_end_virtual
            elif extra is not None and extra[0] == num:
                start_virtual = extra[2] - extra[1]
            prev_end_virtual = om.end_virtual if om is not None else None

            if meta is not None:
                if num < meta.file_num:
                    end, sealed = size, True
                elif num == meta.file_num:
                    end, sealed = min(meta.pos, size), False
                    if size < meta.pos:
                        result.notes.append(f"{rel}: file is shorter ({size}) than the writer meta says ({meta.pos})")
                else:
                    end, sealed = 0, False  # written after the last meta: not committed yet
            elif num < last_num or om is not None:
                end, sealed = size, True
            else:
                end, sealed = self._complete_end(entry.path, size), False
            result.segments.append(
                SegmentInfo(rel, entry.name, topic, partition, end, sealed, start_virtual, size,
                            file_num=num, problem=problem)
            )

    def _complete_end(self, path: str, size: int) -> int:
        """End of the last complete record of a live segment that has no writer meta."""
        seen = self._walked.get(path)
        start = seen[1] if seen is not None and seen[0] <= size and seen[2] != "broken" else 0
        if seen is not None and seen[0] == size:
            return seen[1]
        boundary, kind = last_boundary(path, start, size, self._core, self.chunk_bytes)
        if kind == "broken":
            boundary = size  # framing is lost: the decoder quarantines the rest
        self._walked[path] = (size, boundary, kind)
        return boundary

    # ---------------------------------------------------------------- planning

    def split_points(self, root: str, seg: SegmentInfo, start: int, end: int, target: int) -> list[int]:
        """Record boundaries inside ``(start, end)`` about ``target`` bytes apart."""
        if seg.whole_file or end - start <= target:
            return []
        target = max(target, 1)  # each cut past the one before
        fd = os.open(os.path.join(root, seg.path), os.O_RDONLY)
        try:
            walk = _Boundaries(fd, start, end, self._core, self.chunk_bytes)
            cuts, mark = [], start
            for ends in walk:
                # The first record end at least `target` past the last cut, again and again.
                while (i := int(np.searchsorted(ends, mark + target))) < len(ends):
                    mark = int(ends[i])
                    cuts.append(mark)
        finally:
            os.close(fd)
        return [c for c in cuts if c < walk.end]  # a cut at the end would leave an empty range

    def advance(
        self, root: str, seg: SegmentInfo, start: int, end: int, max_bytes: int | None, max_records: int | None
    ) -> tuple[int, int]:
        """How far to read from ``start`` within a byte and record budget: (boundary, records).

        Always moves past at least one record, so a record larger than the budget still goes.
        """
        if seg.whole_file:
            stop = end if max_bytes is None else min(end, start + max(max_bytes, 1))
            return stop, 0
        fd = os.open(os.path.join(root, seg.path), os.O_RDONLY)
        try:
            walk = _Boundaries(fd, start, end, self._core, self.chunk_bytes)
            pos, count = start, 0
            for ends in walk:
                # The first record of the window that goes over the budget, if one does.
                over = len(ends)
                if max_bytes is not None:
                    over = min(over, int(np.searchsorted(ends, start + max_bytes, side="right")))
                if max_records is not None:
                    over = min(over, max(max_records - count, 0))
                if count == 0:
                    over = max(over, 1)
                if over < len(ends):
                    return (int(ends[over - 1]) if over else pos), count + over
                pos, count = int(ends[-1]), count + len(ends)
        finally:
            os.close(fd)
        if walk.kind != "end":  # corrupt from here, or a cut length prefix: the decoder quarantines it in one go
            return end, count + 1
        return pos, count

    # ---------------------------------------------------------------- decode (task side)

    def decode(self, root: str, seg: SegmentInfo, start: int, end: int) -> Iterator[DecodeResult]:
        """Decode ``[start, end)`` of a segment, ``end`` being a record boundary the scan found.

        Yields one result per chunk. Every byte of the range ends up in a decoded row or a
        quarantine row: a record that runs past ``end`` or a length prefix no writer
        produces means the bytes are corrupt, and they are quarantined with the reason.
        """
        # A file descriptor, not a file object: a trigger's many small tails each open their file,
        # and Python's buffered file costs about 15 us more to open than the descriptor it wraps.
        fd = os.open(os.path.join(root, seg.path), os.O_RDONLY)
        try:
            if seg.whole_file:
                yield from quarantine_range(SOURCE_FORMAT, seg, fd, start, end, seg.problem or "unreadable file",
                                            self.chunk_bytes)
                return
            pos, planned_end = start, end
            while pos < end:
                want = min(end - pos, self.chunk_bytes)
                data = self._read_chunk(fd, want, pos)
                if len(data) < want:  # the file shrank under us (rollback/truncation)
                    end = pos + len(data)
                    if not data:
                        break
                chunk_end = pos + len(data)
                fr, plain = frame_chunk(data, self._core, seg, self.store_host, pos)
                if plain is None and not isinstance(data, bytes):
                    data = bytes(data)  # the step path may keep views of the chunk: its own copy
                if fr.stop_kind == "incomplete" and chunk_end < end and len(fr.positions) == 0:
                    # One record larger than the chunk: read exactly that record.
                    need = 4 + fr.bad_length
                    if pos + need <= end:
                        data = os.pread(fd, need, pos)
                        chunk_end = pos + len(data)
                        fr, plain = frame_chunk(data, self._core, seg, self.store_host, pos)
                qb = QuarantineBuilder(SOURCE_FORMAT, seg)
                chunk = decode_chunk(np.frombuffer(data, np.uint8), pos, fr, seg, self.store_host, qb, self._core,
                                     plain)
                next_pos = pos + fr.stop
                lost = None  # why the rest of the range is quarantined, when it is
                if fr.stop_kind == "broken":
                    lost = (f"invalid length prefix {fr.bad_length}: record framing is lost "
                            "from here to the end of committed data")
                elif fr.stop_kind == "incomplete" and (chunk_end == end or len(fr.positions) == 0):
                    # The range ends on a committed boundary, so a record that runs past it
                    # (or a cut length prefix) is corrupt, not pending.
                    lost = (f"truncated record: {end - next_pos} bytes before the end of committed data"
                            + (f", length prefix says {fr.bad_length}" if fr.bad_length else ""))
                batches = [b for b in (chunk.batch, qb.build() if qb.positions else None) if b is not None]
                if batches:
                    yield DecodeResult(concat_batches(batches), next_pos, chunk.decoded_bytes, qb.nbytes)
                if lost is not None:
                    yield from quarantine_range(SOURCE_FORMAT, seg, fd, next_pos, end, lost, self.chunk_bytes)
                    next_pos = end
                if next_pos <= pos:  # cannot happen on a boundary end; never spin
                    raise RuntimeError(f"{seg.path}: decoder made no progress at {pos}")
                pos = next_pos
            if planned_end > end:
                yield shrink_loss(SOURCE_FORMAT, seg, end, planned_end)
        finally:
            os.close(fd)
