"""RocketMQ consumer positions: ``config/consumerOffset.json`` and the ConsumeQueue lengths.

No Spark here: :func:`read_snapshot` returns plain rows; the ingest job stores them in the
``consumer_offsets`` table.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import dataclass

import numpy as np

from msglake.formats import rocketmq_layout as L

OFFSETS_FILE = os.path.join("config", "consumerOffset.json")
CQ_ENTRY = 20
# fastjson writes the queue ids of the offset table as bare integers: {"t@g":{0:12,1:7}}.
_BARE_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


@dataclass
class Snapshot:
    """Consumer offsets as the broker last persisted them."""

    path: str
    mtime: dt.datetime
    data_version: int | None
    #: (group, topic, queue, offset, messages in the queue or None)
    rows: list[tuple[str, str, int, int, int | None]]


def store_root(path: str) -> str:
    """The broker store root for a source path (the store itself or its ``commitlog`` folder)."""
    path = os.path.abspath(path)
    if not os.path.isdir(os.path.join(path, "commitlog")) and os.path.basename(path) == "commitlog":
        return os.path.dirname(path)
    return path


def parse_offsets(text: str) -> tuple[dict[str, dict[int, int]], int | None]:
    """``consumerOffset.json`` -> ({"topic@group": {queue: offset}}, dataVersion counter).

    >>> parse_offsets('{"dataVersion":{"counter":3},"offsetTable":{"t@g":{0:12,1:7}}}')
    ({'t@g': {0: 12, 1: 7}}, 3)
    """
    doc = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
    if not isinstance(doc, dict) or not isinstance(doc.get("offsetTable", {}), dict):
        raise ValueError("no offsetTable object")
    table = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in doc.get("offsetTable", {}).items()}
    version = doc.get("dataVersion", {}).get("counter") if isinstance(doc.get("dataVersion"), dict) else None
    return table, version


def queue_length(folder: str) -> int | None:
    """Entries in one ConsumeQueue (``consumequeue/<topic>/<queue>``): its max offset."""
    files = sorted(f for f in os.listdir(folder) if L.FILE_NAME_RE.match(f))
    if not files:
        return None
    last = os.path.join(folder, files[-1])
    data = np.fromfile(last, np.uint8)
    entries = data[: len(data) // CQ_ENTRY * CQ_ENTRY].reshape(-1, CQ_ENTRY)
    sizes = entries[:, 8:12].copy().view(">i4").reshape(-1)
    empty = np.flatnonzero(sizes == 0)  # the pre-sized file's unwritten tail
    used = int(empty[0]) if len(empty) else len(sizes)
    return int(files[-1]) // CQ_ENTRY + used


def read_snapshot(path: str) -> Snapshot | None:
    """The consumer offsets of the store at ``path``; None when the store has no offsets file.

    Raises ``ValueError`` when the file is there but cannot be read as offsets.
    """
    root = store_root(path)
    file = os.path.join(root, OFFSETS_FILE)
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
        mtime = dt.datetime.fromtimestamp(os.stat(file).st_mtime, dt.timezone.utc)
    except FileNotFoundError:
        return None
    try:
        table, version = parse_offsets(text)
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{file}: not a consumer offsets file ({e})") from None
    cq = os.path.join(root, "consumequeue")
    rows = []
    for key, queues in sorted(table.items()):
        topic, sep, group = key.rpartition("@")
        if not sep:
            continue
        for queue, offset in sorted(queues.items()):
            folder = os.path.join(cq, topic, str(queue))
            length = queue_length(folder) if os.path.isdir(folder) else None
            rows.append((group, topic, queue, offset, length))
    return Snapshot(file, mtime, version, rows)
