"""Reads what a streaming checkpoint says: query id and the committed source positions."""
from __future__ import annotations

import json
import os


def query_id(checkpoint: str) -> str | None:
    """The stable id Spark keeps in ``<checkpoint>/metadata`` (None before the first start)."""
    try:
        with open(os.path.join(checkpoint, "metadata")) as f:
            return json.loads(f.readline())["id"]
    except FileNotFoundError:
        return None


def _numbered(folder: str) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(folder) if n.isdigit())
    except FileNotFoundError:
        return []


def committed_offset(checkpoint: str) -> dict | None:
    """The source offset of the last batch the checkpoint marks committed (None: no batch is):
    where the query's next batch starts."""
    committed = _numbered(os.path.join(checkpoint, "commits"))
    return batch_offset(checkpoint, committed[-1]) if committed else None


def committed_positions(checkpoint: str) -> dict[str, int]:
    """Byte positions per segment of the last batch the checkpoint marks committed."""
    return {k: int(v) for k, v in (committed_offset(checkpoint) or {}).get("segments", {}).items()}


def batch_offset(checkpoint: str, batch_id: int) -> dict | None:
    """The source offset that ends micro-batch ``batch_id`` (None when there is none)."""
    try:
        with open(os.path.join(checkpoint, "offsets", str(batch_id))) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    # offsets/N: "v1", batch metadata, then one line per source.
    return json.loads(lines[2])


def bytes_moved(start: dict | None, end: dict) -> int:
    """Segment bytes a micro-batch covers: position advances plus ranges lost to deletion."""
    begun = (start or {}).get("segments", {})
    moved = sum(pos - begun.get(path, 0) for path, pos in end.get("segments", {}).items())
    lost = sum(b - a for a, b in end.get("deleted", {}).values() if b is not None)
    return moved + lost
