"""Snapshots of a RocketMQ store's consumer offsets into the ``consumer_offsets`` table."""
from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
from pyspark.sql import functions as F

from msglake.formats.rocketmq_offsets import read_snapshot
from msglake.pipelines.io.catalog import ensure_table
from msglake.pipelines.io.once import made_empty
from msglake.pipelines.settings import Settings, SourceSettings
from msglake.schemas import CONSUMER_OFFSETS_SCHEMA, CONSUMER_OFFSETS_TABLE


class ConsumerOffsetRecorder:
    """Appends the broker's consumer offsets to ``consumer_offsets`` each time its file changed.

    Called at the start of a run (in the background, :meth:`record_soon`), after every
    micro-batch and at the end of the run. A snapshot is identified by the
    file's modification time: one already in the table (for this source) is not written
    again, so re-runs add nothing.
    """

    def __init__(self, spark, settings: Settings, src: SourceSettings):
        self.spark, self.settings, self.src = spark, settings, src
        self._last: dt.datetime | None = None
        self._loaded = False
        self._path: str | None = None
        self._lock = threading.Lock()
        self.rows_written = 0
        self._early: Future | None = None
        self.problems: list[str] = []

    @property
    def path(self) -> str | None:
        """The table's location, once a snapshot was looked for in an existing offsets file."""
        return self._path

    def record_soon(self) -> None:
        """Start a :meth:`record` in the background: the ingest job's first, made while its query
        starts (the source's Python process takes 1-2 s to start, the driver waits; the snapshot's
        table, its read and its write cost a RocketMQ ingest 1.0-1.4 s after its first batch).
        The next :meth:`record` waits for it and raises what it raised."""
        pool = ThreadPoolExecutor(1, thread_name_prefix="msglake-offsets")
        self._early = pool.submit(self._record)
        pool.shutdown(wait=False)

    def settle(self) -> None:
        """Wait for a :meth:`record_soon` not waited for yet, ignoring its failure: a run that
        fails (before its first batch, say) raises its own error, and leaves no snapshot being
        written behind it. (Its snapshot may then be in the table: one of the broker's file as
        it was, which a later run would not write again.)"""
        early, self._early = self._early, None
        if early is not None:
            early.exception()

    def record(self) -> int:
        """Write a snapshot if the offsets file changed; returns the rows written by this call and
        by a :meth:`record_soon` not waited for before."""
        early, self._early = self._early, None
        made = early.result() if early is not None else 0
        return made + self._record()

    def _record(self) -> int:
        with self._lock:
            try:
                snap = read_snapshot(self.src.path)
            except (ValueError, OSError) as e:
                if str(e) not in self.problems:
                    self.problems.append(str(e))
                return 0
            if snap is None:
                return 0
            if self._path is None:
                self._path = ensure_table(self.spark, self.settings, CONSUMER_OFFSETS_TABLE)
            path = self._path
            if not self._loaded and made_empty(path):
                self._last, self._loaded = None, True  # a table just made: no snapshot to read
            if not self._loaded:
                # As epoch microseconds: collected timestamps would come back in the local zone.
                last = (
                    self.spark.read.format("delta").load(path)
                    .where(F.col("source") == self.src.name)
                    .agg(F.unix_micros(F.max("snapshotTime")).alias("t")).first()["t"]
                )
                self._last = (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=last)
                              if last is not None else None)
                self._loaded = True
            taken = snap.mtime
            if self._last is not None and taken <= self._last:
                return 0
            now = dt.datetime.now(dt.timezone.utc)
            n = len(snap.rows)
            table = pa.table(
                {
                    "source": [self.src.name] * n,
                    "group": [r[0] for r in snap.rows],
                    "topic": [r[1] for r in snap.rows],
                    "queue": [r[2] for r in snap.rows],
                    "offset": [r[3] for r in snap.rows],
                    "queueMaxOffset": [r[4] for r in snap.rows],
                    "snapshotTime": [taken] * n,
                    "dataVersion": [snap.data_version] * n,
                    "ingestedAt": [now] * n,
                },
                schema=CONSUMER_OFFSETS_SCHEMA,
            )
            if n:
                self.spark.createDataFrame(table).write.format("delta").mode("append").save(path)
            self._last = taken
            self.rows_written += n
            return n
