"""Writes RocketMQ stores in the real layout: CommitLog files, ConsumeQueues, consumer offsets.

For the demo, the tests and the benchmarks. Records are laid out as ``MessageExtEncoder``
and ``CommitLog.DefaultAppendMessageCallback.doAppend`` write them (spec §1-2): 20-digit
file names that are the files' start offsets, files pre-sized to a fixed length (zeros
until written), PHYSICALOFFSET = file start + position, and a blank record (TOTALSIZE =
the space left, BLANK magic; nothing else written) when the next record does not fit.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass, field

import cramjam

from msglake.formats import rocketmq_layout as L

#: Small files for tests and demos (the broker's default is 1 GiB).
DEFAULT_TEST_FILE_SIZE = 1 << 20
#: ``mappedFileSizeConsumeQueue``: 300,000 entries of 20 bytes.
CQ_FILE_SIZE = 300_000 * 20
_CQ_ENTRY = struct.Struct(">qiq")


@dataclass
class Inner:
    """One message of an inner-batch record (batch ConsumeQueue topics, spec §5.7)."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0


@dataclass
class Message:
    """A message to store; defaults give a plain v1 record between IPv4 hosts."""

    topic: str
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    born_timestamp: int = 1_793_500_000_000  # ms, 2026-11-01
    store_timestamp: int = 1_793_500_000_005
    born_host: str = "127.0.0.1:50000"
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_offset: int = 0
    #: Transaction bits of SYSFLAG: 0, ``TRANSACTION_PREPARED``, ``_COMMIT`` or ``_ROLLBACK``.
    transaction: int = 0
    #: Compress the body with this codec (``zlib``, ``lz4``, ``zstd``) and set the SYSFLAG bits.
    compression: str | None = None
    #: Legacy producers: compressed with zlib and no type bits (type 0).
    compression_type_bits: bool = True
    #: Magic version; None picks v2 for topics longer than 127 bytes, as the broker does.
    version: int | None = None
    #: Inner-batch messages: the body becomes their packed mini-records.
    inner: list[Inner] | None = None
    #: Append the 5.2+ ``__CRC32#`` property trailer.
    crc32_trailer: bool = False
    #: A member of a batch send (``producer.send(List<Message>)``): the batch's own properties,
    #: which the broker appends after the message's, its UNIQ_KEY among them (the second
    #: UNIQ_KEY of the record: RocketMQ's decoder reports this last one).
    batch_properties: dict[str, str] | None = None
    #: Text appended to the properties as is (pieces no serializer would write, for tests).
    raw_properties: str = ""


@dataclass(frozen=True)
class Written:
    """Where a record landed."""

    segment: str
    position: int
    physical_offset: int
    queue_offset: int
    length: int
    message_id: str
    body: bytes  # as stored (compressed when the message asked for it)
    body_position: int = 0  # file position of the body (an inner batch's first message)


def pack_inner(messages: list[Inner]) -> bytes:
    """``MessageDecoder.encodeMessage`` for each message: the body of an inner-batch record."""
    out = []
    for m in messages:
        props = L.properties_to_string(m.properties).encode()
        size = 4 + 4 + 4 + 4 + 4 + len(m.body) + 2 + len(props)
        out.append(struct.pack(">iiiii", size, 0, 0, m.flag, len(m.body)) + m.body + struct.pack(">h", len(props)) + props)
    return b"".join(out)


def compress(body: bytes, codec: str) -> bytes:
    if codec == "zlib":
        return zlib.compress(body, 5)
    if codec == "lz4":
        return bytes(cramjam.lz4.compress(body))
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(body))
    raise ValueError(f"unknown compression {codec!r}")


def encode_record(m: Message, physical_offset: int, queue_offset: int) -> tuple[bytes, bytes]:
    """One CommitLog record as stored, and its stored body."""
    sysflag = m.transaction & L.TRANSACTION_MASK
    props = dict(m.properties)
    body = m.body
    if m.inner is not None:
        body = pack_inner(m.inner)
        sysflag |= L.NEED_UNWRAP_FLAG | L.INNER_BATCH_FLAG
        props.setdefault("INNER_NUM", str(len(m.inner)))
        props.setdefault("INNER_BASE", str(queue_offset))
    if m.compression is not None:
        body = compress(body, m.compression)
        sysflag |= L.COMPRESSED_FLAG
        if m.compression_type_bits:
            sysflag |= L.COMPRESSION_BITS[m.compression] << 8
    born = L.host_bytes(m.born_host)
    store = L.host_bytes(m.store_host)
    if len(born) == 20:
        sysflag |= L.BORNHOST_V6_FLAG
    if len(store) == 20:
        sysflag |= L.STOREHOST_V6_FLAG
    topic = m.topic.encode()
    version = m.version if m.version is not None else (2 if len(topic) > 127 else 1)
    topic_len = struct.pack(">h", len(topic)) if version == 2 else struct.pack(">b", len(topic))
    prop_text = L.properties_to_string(props)
    if m.batch_properties:
        prop_text += L.properties_to_string(m.batch_properties)
    prop_text += m.raw_properties
    if m.crc32_trailer:
        prop_text += L.crc32_trailer(0)  # digits of a CRC we do not check; the key is what readers meet
    prop_bytes = prop_text.encode()
    tail = (
        struct.pack(">q", m.store_timestamp) + store + struct.pack(">iqi", m.reconsume_times, m.prepared_offset, len(body))
        + body + topic_len + topic + struct.pack(">h", len(prop_bytes)) + prop_bytes
    )
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + len(tail)
    head = struct.pack(
        ">iiiiiqqiq", total, L.MAGIC_V2 if version == 2 else L.MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF,
        m.queue_id, m.flag, queue_offset, physical_offset, sysflag, m.born_timestamp,
    )
    return head + born + tail, body


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` as a signed int32 (the ConsumeQueue's tagsCode).

    >>> java_string_hash("TAG1")
    2567159
    """
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class CommitLogWriter:
    """Appends records to ``<store>/commitlog`` like a broker, and keeps ConsumeQueue entries.

    Parameters
    ----------
    store : str
        The store root (``storePathRootDir``): ``commitlog/``, ``consumequeue/``, ``config/``.
    file_size : int
        ``mappedFileSizeCommitLog``; every file is created at this size.
    first_offset : int
        Start offset of the first file (older files already deleted), a multiple of ``file_size``.
    """

    def __init__(self, store: str, file_size: int = DEFAULT_TEST_FILE_SIZE, first_offset: int = 0):
        if first_offset % file_size:
            raise ValueError("first_offset must be a multiple of file_size")
        self.store, self.file_size = store, file_size
        self.dir = os.path.join(store, "commitlog")
        os.makedirs(self.dir, exist_ok=True)
        self.file_start = first_offset
        self.pos = 0
        self.queue_offsets: dict[tuple[str, int], int] = {}
        #: (topic, queue) -> [(physical offset, size, tags code)], the ConsumeQueue entries.
        self.cq: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        #: Blank end-of-file bytes written so far, and the last record (position, length) per file.
        self.padding = 0
        self.last_record: dict[str, tuple[int, int]] = {}
        self._fd = None
        self._open()

    # ------------------------------------------------------------------ files

    @property
    def segment(self) -> str:
        return L.file_name(self.file_start)

    def _open(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        path = os.path.join(self.dir, self.segment)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < self.file_size:
            os.ftruncate(self._fd, self.file_size)  # pre-sized, zero-filled, as the broker maps it

    def _roll(self) -> None:
        """Write the blank end-of-file record and continue in the next file."""
        left = self.file_size - self.pos
        if left >= L.BLANK_LENGTH:
            os.pwrite(self._fd, struct.pack(">ii", left, L.MAGIC_BLANK), self.pos)
            self.padding += left
        self.file_start += self.file_size
        self.pos = 0
        self._open()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ records

    def put(self, m: Message) -> Written:
        """Append one message; rolls to a new file (after a blank) when it does not fit."""
        key = (m.topic, m.queue_id)
        txn = m.transaction & L.TRANSACTION_MASK
        counted = txn in (0, L.TRANSACTION_COMMIT)  # prepared/rollback records get queue offset 0
        queue_offset = self.queue_offsets.get(key, 0) if counted else 0
        record, body = encode_record(m, self.file_start + self.pos, queue_offset)
        if len(record) + L.BLANK_LENGTH > self.file_size - self.pos:
            if len(record) + L.BLANK_LENGTH > self.file_size:
                raise ValueError(f"record of {len(record)} bytes cannot fit a {self.file_size}-byte file")
            self._roll()
            record, body = encode_record(m, self.file_start + self.pos, queue_offset)
        w = self._write(record, queue_offset, body, m.store_host, 72 + len(L.host_bytes(m.born_host))
                        + len(L.host_bytes(m.store_host)))
        if counted:
            count = len(m.inner) if m.inner is not None else 1
            self.queue_offsets[key] = queue_offset + count
            tags = m.properties.get("TAGS")
            self.cq.setdefault(key, []).append((w.physical_offset, len(record), java_string_hash(tags) if tags else 0))
        return w

    def _write(self, record: bytes, queue_offset: int, body: bytes, store_host: str, body_at: int) -> Written:
        phy = self.file_start + self.pos
        os.pwrite(self._fd, record, self.pos)
        w = Written(self.segment, self.pos, phy, queue_offset, len(record),
                    L.offset_message_id(L.host_bytes(store_host), phy), body, self.pos + body_at)
        self.last_record[self.segment] = (self.pos, len(record))
        self.pos += len(record)
        return w

    def put_raw(self, data: bytes) -> Written:
        """Write arbitrary bytes at the current position (corrupt records for tests)."""
        if self.pos + len(data) + L.BLANK_LENGTH > self.file_size:
            self._roll()
        w = Written(self.segment, self.pos, self.file_start + self.pos, -1, len(data), "", b"")
        os.pwrite(self._fd, data, self.pos)
        self.last_record[self.segment] = (self.pos, len(data))
        self.pos += len(data)
        return w

    def record_bytes(self, m: Message) -> bytes:
        """The bytes ``put(m)`` would write at the current position (to corrupt them first)."""
        return encode_record(m, self.file_start + self.pos, self.queue_offsets.get((m.topic, m.queue_id), 0))[0]

    # ------------------------------------------------------------------ side files

    def write_consume_queues(self, cq_file_size: int = CQ_FILE_SIZE) -> None:
        """``consumequeue/<topic>/<queue>/<20-digit start>``: 20-byte entries (spec §2.4)."""
        for (topic, queue), entries in self.cq.items():
            folder = os.path.join(self.store, "consumequeue", topic, str(queue))
            os.makedirs(folder, exist_ok=True)
            for start in range(0, max(len(entries), 1) * 20, cq_file_size):
                chunk = entries[start // 20 : (start + cq_file_size) // 20]
                data = b"".join(_CQ_ENTRY.pack(*e) for e in chunk)
                with open(os.path.join(folder, L.file_name(start)), "wb") as f:
                    f.write(data)
                    f.truncate(cq_file_size)


def write_consumer_offsets(store: str, offsets: dict[tuple[str, str], dict[int, int]], counter: int = 1) -> str:
    """``config/consumerOffset.json`` as fastjson writes it: ``topic@group`` keys, bare integer queue ids."""
    table = ",".join(
        f"{json.dumps(f'{topic}@{group}')}:{{" + ",".join(f"{q}:{o}" for q, o in sorted(qs.items())) + "}"
        for (topic, group), qs in sorted(offsets.items())
    )
    text = f'{{"dataVersion":{{"counter":{counter},"stateVersion":0,"timestamp":1793500000000}},"offsetTable":{{{table}}}}}'
    folder = os.path.join(store, "config")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "consumerOffset.json")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path
