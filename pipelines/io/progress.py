"""Progress of the ingest query: a live line for people, JSON lines for machines.

Per micro-batch: messages/s, bytes/s (segment bytes consumed), quarantined records, and the
backlog per topic/partition (bytes on disk not yet ingested, uncommitted tails included),
which the source reports with its latest offset.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO

from pyspark.sql.streaming import StreamingQueryListener

from msglake.pipelines.io.checkpoint import bytes_moved
from msglake.pipelines.io.sinks import RunCounts


def _offset_doc(offset_json: str | None) -> dict:
    """An offset as the progress reports it (a JSON string), parsed; {} when absent."""
    if not offset_json:
        return {}
    try:
        doc = json.loads(offset_json)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


@dataclass
class ProgressReporter:
    """Turns query progress events into metrics records.

    Parameters
    ----------
    metrics_path : str, optional
        Append one JSON object per batch to this file.
    live : IO, optional
        Where to show the progress line (``sys.stderr`` by default); on a terminal the line
        is redrawn in place, elsewhere one line per batch is printed.
    """

    metrics_path: str | None = None
    live: IO | None = field(default_factory=lambda: sys.stderr)
    counts: RunCounts | None = None
    records: list[dict] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def listener(self) -> StreamingQueryListener:
        return _Listener(self)

    def record(self, progress) -> dict:
        """The metrics record of one progress event (also kept in ``records``)."""
        [src] = progress.sources or [None]
        start_doc = _offset_doc(src.startOffset if src else None)
        end_doc = _offset_doc(src.endOffset if src else None)
        latest = _offset_doc(src.latestOffset if src else None)
        consumed = bytes_moved(start_doc, end_doc)
        seconds = max(progress.durationMs.get("triggerExecution", 0), 1) / 1000.0
        batch = None
        if self.counts is not None:
            batch = next((b for b in self.counts.batches if b.batch_id == progress.batchId), None)
        messages = batch.messages if batch else 0
        rec = {
            "timestamp": progress.timestamp,
            "batchId": progress.batchId,
            "durationMs": progress.durationMs.get("triggerExecution"),
            "messages": messages,
            "quarantined": batch.quarantined if batch else 0,
            "ruleHits": dict(batch.rule_hits) if batch else {},
            "bytes": consumed,
            "messagesPerSecond": round(messages / seconds, 1),
            "bytesPerSecond": round(consumed / seconds, 1),
            "backlogBytes": sum(latest.get("backlog", {}).values()),
            "backlog": latest.get("backlog", {}),
            "deletedUnread": end_doc.get("deleted", {}),
        }
        with self._lock:
            self.records.append(rec)
            if self.metrics_path:
                with open(self.metrics_path, "a") as f:
                    f.write(json.dumps(rec) + "\n")
        self._show(rec)
        return rec

    def ran(self, progress) -> bool:
        """Whether a progress event shows work done: rows read, or segment bytes moved past (a
        batch of padding alone), or segments deleted before they were read. Spark also reports
        batches that moved over nothing (a query's first over an empty folder) and queries idle
        for a while (``noDataProgressEventInterval``): no line for those."""
        if progress.numInputRows:
            return True
        [src] = progress.sources or [None]
        if src is None:
            return False
        end = _offset_doc(src.endOffset)
        return bytes_moved(_offset_doc(src.startOffset), end) > 0 or bool(end.get("deleted"))

    def wait_for(self, batch_id: int, timeout: float = 10.0) -> None:
        """Wait until the (asynchronous) listener has seen ``batch_id``, so nothing is left unsaid."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if any(r["batchId"] >= batch_id for r in self.records):
                    return
            time.sleep(0.05)

    def _show(self, rec: dict) -> None:
        if self.live is None:
            return
        line = (
            f"batch {rec['batchId']}: {rec['messages']:,} msgs ({rec['messagesPerSecond']:,.0f}/s, "
            f"{_mb(rec['bytesPerSecond'])}/s), quarantined {rec['quarantined']}, "
            f"backlog {_mb(rec['backlogBytes'])}"
        )
        if rec["deletedUnread"]:
            line += f", DELETED BEFORE READ: {', '.join(rec['deletedUnread'])}"
        if getattr(self.live, "isatty", lambda: False)():
            self.live.write("\r\x1b[2K" + line)
        else:
            self.live.write(line + "\n")
        self.live.flush()

    def close(self) -> None:
        if self.live is not None and getattr(self.live, "isatty", lambda: False)() and self.records:
            self.live.write("\n")
            self.live.flush()


class _Listener(StreamingQueryListener):
    def __init__(self, reporter: ProgressReporter):
        self.reporter = reporter

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        if self.reporter.ran(event.progress):
            self.reporter.record(event.progress)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
