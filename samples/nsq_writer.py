"""Writes NSQ (youzan) disk queues in the real layout: segments, rollover and meta files.

Used by the demo, the tests and the benchmarks to produce bytes exactly as nsqd lays them
out (``writeOne``/``internalWriteTo``, spec nsq-ext-segment.md §1-2).
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass

import orjson

from msglake.formats import nsq_layout as L
from msglake.formats.nsq_ext import EXT_FLAG, JSON_HEADER_EXT_VER, MAX_ATTEMPTS, NO_EXT_VER, TAG_EXT_VER

DEFAULT_MAX_BYTES_PER_FILE = 100 << 20
_FIXED = struct.Struct(">qHQQ")


@dataclass(frozen=True)
class Written:
    """Where a record landed."""

    segment: str
    position: int
    virtual_offset: int
    framed_size: int


def encode_message(
    body: bytes,
    *,
    timestamp_ns: int,
    message_id: int,
    trace_id: int = 0,
    attempts: int = 0,
    ext: bool = True,
    ext_version: int | None = None,
    ext_data: bytes = b"",
) -> bytes:
    """One message as stored (without the 4-byte length prefix).

    Examples
    --------
    The spec's check: an ext-4 record with a 4-byte ext and a 10-byte body is 47 bytes framed.

    >>> len(encode_message(bytes(10), timestamp_ns=0, message_id=1, ext_version=4, ext_data=b"tes0")) + 4
    47
    """
    if not 0 <= attempts <= MAX_ATTEMPTS:
        raise ValueError(f"attempts must be within 0..{MAX_ATTEMPTS}, got {attempts}")
    if not ext:
        if ext_version is not None:
            raise ValueError("a non-ext topic cannot carry an ext version")
        return _FIXED.pack(timestamp_ns, attempts, message_id, trace_id) + body
    version = NO_EXT_VER if ext_version is None else ext_version
    head = _FIXED.pack(timestamp_ns, attempts + EXT_FLAG, message_id, trace_id) + bytes([version])
    if version == NO_EXT_VER:
        return head + body
    if len(ext_data) >= 0xFFFF:
        raise ValueError("extend data exceed the limit (65535)")
    return head + struct.pack(">H", len(ext_data)) + ext_data + body


def header_bytes(header: dict) -> bytes:
    """JSON header as go-nsq writes it (a Go map: keys sorted, compact)."""
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


class NsqQueueWriter:
    """Appends messages to ``<data>/<topic>/<topic>-<partition>.diskqueue.N.dat``.

    Rolls to the next file after a record once the position reaches ``max_bytes_per_file``
    (as nsqd does), writing the closed file's ``.offsetmeta.dat``; :meth:`flush` persists the
    writer meta (``.meta.writer.dat``) that marks the committed end.

    Parameters
    ----------
    data_path : str
        The nsqd ``--data-path``.
    topic, partition
        Queue to write.
    ext : bool
        Whether the topic is an ext topic (records carry the 0xA000 flag).
    """

    def __init__(
        self,
        data_path: str,
        topic: str,
        partition: int,
        *,
        ext: bool = True,
        max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE,
        file_num: int = 0,
        virtual_start: int = 0,
        first_message_id: int = 1,
    ):
        self.dir = os.path.join(data_path, topic)
        os.makedirs(self.dir, exist_ok=True)
        self.topic, self.partition, self.ext = topic, partition, ext
        self.max_bytes = max_bytes_per_file
        self.file_num, self.pos, self.virtual = file_num, 0, virtual_start
        self.count = 0
        self.next_id = first_message_id
        self._file = None
        self._file_start_virtual = virtual_start
        self._open()

    @property
    def segment(self) -> str:
        return L.segment_file_name(self.topic, self.partition, self.file_num)

    def _open(self) -> None:
        path = os.path.join(self.dir, self.segment)
        self._file = open(path, "ab")
        self.pos = self._file.tell()

    def put(self, body: bytes, **fields) -> Written:
        """Append one message; ``fields`` as for :meth:`frame`."""
        return self.put_raw(self.frame(body, **fields))

    def frame(
        self,
        body: bytes,
        *,
        header: dict | bytes | None = None,
        tag: str | None = None,
        trace_id: int = 0,
        timestamp_ns: int | None = None,
        attempts: int = 0,
        message_id: int | None = None,
        ext: bool | None = None,
    ) -> bytes:
        """One message framed as this queue stores it (the next message id is taken).

        A header makes it ext version 4, a tag version 2, else version 0 on an ext topic.
        ``ext=False`` writes a record without the ext flag into an ext topic, as found in
        topics upgraded to ext after they had data.
        """
        if header is not None and tag is not None:
            raise ValueError("give a JSON header or a tag, not both")
        version, data = None, b""
        if header is not None:
            version, data = JSON_HEADER_EXT_VER, header if isinstance(header, bytes) else header_bytes(header)
            # nsqd copies a ##trace_id header into the record's trace half.
            if isinstance(header, dict) and trace_id == 0 and str(header.get("##trace_id", "")).isdigit():
                trace_id = int(header["##trace_id"]) & ((1 << 64) - 1)
        elif tag is not None:
            version, data = TAG_EXT_VER, tag.encode()
        elif self.ext and ext is not False:
            version = NO_EXT_VER
        if message_id is None:
            message_id, self.next_id = self.next_id, self.next_id + 1
        msg = encode_message(
            body,
            timestamp_ns=time.time_ns() if timestamp_ns is None else timestamp_ns,
            message_id=message_id,
            trace_id=trace_id,
            attempts=attempts,
            ext=self.ext if ext is None else ext,
            ext_version=version,
            ext_data=data,
        )
        return struct.pack(">i", len(msg)) + msg

    def put_raw(self, framed: bytes, records: int = 1) -> Written:
        """Append bytes exactly as given (already framed, or deliberately corrupt)."""
        self._file.write(framed)
        return self._advance(len(framed), records)

    def put_torn(self, framed: bytes, cut: int, pause: float = 0.0) -> Written:
        """Append a framed record in two writes, the first flushed to disk alone.

        This is what readers of a live segment see when nsqd's buffered writer flushes in the
        middle of a record: a partial record past the committed end, completed later.
        """
        self._file.write(framed[:cut])
        self._file.flush()
        if pause:
            time.sleep(pause)
        self._file.write(framed[cut:])
        return self._advance(len(framed), 1)

    def _advance(self, size: int, records: int) -> Written:
        written = Written(self.segment, self.pos, self.virtual, size)
        self.pos += size
        self.virtual += size
        self.count += records
        if self.pos >= self.max_bytes:
            self._roll()
        return written

    def roll(self) -> None:
        """Close the current segment and continue in the next one (as nsqd does at the size limit)."""
        self._roll()

    def _roll(self) -> None:
        self._file.close()
        meta = L.OffsetMeta(self.count, self._file_start_virtual, self.virtual)
        with open(os.path.join(self.dir, self.segment + ".offsetmeta.dat"), "wb") as f:
            f.write(L.format_offset_meta(meta))
        self.file_num += 1
        self._file_start_virtual = self.virtual
        self._open()

    def flush(self) -> None:
        """Flush the data, then persist the writer meta (the committed end)."""
        self._file.flush()
        meta = L.WriterMeta(self.count, self.file_num, self.pos, self.virtual)
        path = L.writer_meta_path(self.dir, L.queue_name(self.topic, self.partition))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(L.format_writer_meta(meta)[: -len(L.META_MAGIC)])
        with open(path, "wb") as f:
            f.write(L.format_writer_meta(meta))

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

    def __enter__(self) -> "NsqQueueWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
