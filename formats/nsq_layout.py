"""youzan/nsq disk-queue names and meta files (docs/nsq-ext-segment.md §2)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import orjson

#: Trailer of the writer meta file (``diskMagicEndBytes``).
META_MAGIC = b"\xae\x83"
#: Above this file number, segment names use 9 digits (``FileNumV2Seq``).
FILE_NUM_V2_SEQ = 999990

TOPIC_RE = re.compile(r"^[.a-zA-Z0-9_-]{1,64}$")
# Take the partition from the last "-N" before ".diskqueue." (topic names may hold "-").
SEGMENT_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.diskqueue\.(?P<num>\d{6}|\d{9})\.dat$")
WRITER_META_RE = re.compile(r"^(?P<queue>.+)\.diskqueue\.meta\.writer\.dat$")

# Files that live beside the segments and are not message data, or not in this layout.
_NOT_SEGMENT = (
    (re.compile(r"\.diskqueue\.meta\.writer\.dat(\.tmp)?$"), "writer meta"),
    (re.compile(r"\.diskqueue\.meta\.extra\.dat$"), "queue start meta"),
    (re.compile(r"\.dat\.offsetmeta\.dat$"), "segment offset meta"),
    (re.compile(r"\.diskqueue\.meta\.v2\.reader\.dat$"), "consumer position meta"),
    (re.compile(r"\.rolldata$"), "rolled-back segment (ignored by nsqd too)"),
    (re.compile(r"[-;]\[delayed\.queue\]"), "delayed-queue file (different record layout)"),
    (re.compile(r"\.commit\.log"), "cluster commit log"),
    (re.compile(r"^(magic|channel_meta)\d+$"), "topic meta"),
    (re.compile(r"\.stat\.history\.dat$"), "topic statistics"),
    (re.compile(r"\.db$"), "bolt database"),
)


def segment_file_name(topic: str, partition: int, file_num: int) -> str:
    """``<topic>-<part>.diskqueue.%06d.dat`` (``%09d`` past ``FileNumV2Seq``).

    Examples
    --------
    >>> segment_file_name("orders", 0, 0)
    'orders-0.diskqueue.000000.dat'
    >>> segment_file_name("orders", 2, 999991)
    'orders-2.diskqueue.000999991.dat'
    """
    digits = 9 if file_num > FILE_NUM_V2_SEQ else 6
    return f"{topic}-{partition}.diskqueue.{file_num:0{digits}d}.dat"


def queue_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def classify(file_name: str) -> str | None:
    """Why a file beside the segments is not read, or None when it may be a segment."""
    for pattern, why in _NOT_SEGMENT:
        if pattern.search(file_name):
            return why
    return None


@dataclass(frozen=True)
class WriterMeta:
    """``<q>.diskqueue.meta.writer.dat``: where the writer's committed data ends."""

    total_count: int
    file_num: int
    pos: int
    virtual_end: int


@dataclass(frozen=True)
class OffsetMeta:
    """``<segment>.offsetmeta.dat``, written when a segment closes."""

    count: int
    start_virtual: int
    end_virtual: int


def _two_lines(text: str) -> tuple[str, str]:
    lines = text.split("\n")
    if len(lines) < 2:
        raise ValueError("expected two lines")
    return lines[0].strip(), lines[1].strip()


def parse_writer_meta(data: bytes) -> WriterMeta:
    """Parse a writer meta file. Raises ``ValueError`` when it is malformed.

    A trailing magic is accepted and stripped; older files lack it.

    Examples
    --------
    >>> parse_writer_meta(b"10\\n0,140,140\\n\\xae\\x83")
    WriterMeta(total_count=10, file_num=0, pos=140, virtual_end=140)
    """
    if data.endswith(META_MAGIC):
        data = data[: -len(META_MAGIC)]
    count, pos_line = _two_lines(data.decode("ascii"))
    parts = pos_line.split(",")
    if len(parts) != 3:
        raise ValueError(f"expected FileNum,Pos,VirtualEnd, got {pos_line!r}")
    file_num, pos, vend = (int(p) for p in parts)
    if min(file_num, pos, vend) < 0:
        raise ValueError("negative position")
    return WriterMeta(int(count), file_num, pos, vend)


def format_writer_meta(meta: WriterMeta) -> bytes:
    return f"{meta.total_count}\n{meta.file_num},{meta.pos},{meta.virtual_end}\n".encode() + META_MAGIC


def parse_offset_meta(data: bytes) -> OffsetMeta:
    """Parse ``cnt\\nstartVirtual,endVirtual\\n``.

    Examples
    --------
    >>> parse_offset_meta(b"9\\n0,126\\n")
    OffsetMeta(count=9, start_virtual=0, end_virtual=126)
    """
    count, pos_line = _two_lines(data.decode("ascii"))
    start, end = (int(p) for p in pos_line.split(","))
    if start < 0 or end < start:
        raise ValueError(f"bad virtual range {pos_line!r}")
    return OffsetMeta(int(count), start, end)


def format_offset_meta(meta: OffsetMeta) -> bytes:
    return f"{meta.count}\n{meta.start_virtual},{meta.end_virtual}\n".encode()


def parse_extra_meta(data: bytes) -> tuple[int, int, int]:
    """``meta.extra.dat`` JSON -> (FileNum, Pos, VirtualOffset) of the queue start."""
    doc = orjson.loads(data)
    seg = doc["SegOffset"]
    return int(seg["FileNum"]), int(seg["Pos"]), int(doc["VirtualOffset"])


def read_small(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except FileNotFoundError:
        return None


def writer_meta_path(topic_dir: str, queue: str) -> str:
    return os.path.join(topic_dir, f"{queue}.diskqueue.meta.writer.dat")
