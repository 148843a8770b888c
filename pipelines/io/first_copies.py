"""The first copies of ``messages`` a producer retry could repeat, kept between micro-batches.

Retry marking (``transforms.dedup.find_retries``) needs the first copies stored within the
watermark before a batch's first store time. Reading them from the table costs each batch a
Delta snapshot, its file filtering and a scan (about 0.6 s of a small micro-batch here). The
ingest sink is usually the table's only writer, so it keeps what it needs instead: the window
it read once, plus the first copies each of its batches wrote, as checkpointed pieces.

They stand for the table only while the table has no commit but the sink's own (its log's
newest version is the one the sink's last write made) and the batch's window starts where
they are complete; otherwise the batch reads the table, as before, and the pieces start again
from what it read.
"""
from __future__ import annotations

import datetime as dt
from functools import reduce

from pyspark.sql import DataFrame, SparkSession, functions as F

from msglake.pipelines.io.once import log_version
from msglake.transforms.dedup import RETRY_LOCATION

#: What ``transforms.dedup.retry_keys`` keeps of a row.
COLUMNS = ("dedupKey", "storeTimestamp", *RETRY_LOCATION)
#: More pieces than this are merged into one (a union of many plans costs planning time).
MAX_PIECES = 8


def _utc(t: dt.datetime) -> dt.datetime:
    """An instant to reckon with: Spark hands timestamps to Python as naive local times, whose
    arithmetic would be an hour off across a daylight-saving change."""
    return t.astimezone(dt.timezone.utc)


class FirstCopies:
    """First copies (a ``dedupKey`` and no ``retryOf``) of the ``messages`` table at ``path``."""

    def __init__(self, path: str, watermark_seconds: int):
        self.path = path
        self.watermark = dt.timedelta(seconds=watermark_seconds)
        #: (newest store time, rows): every first copy stored at or after ``low`` is in one.
        self.pieces: list[tuple[dt.datetime, DataFrame]] = []
        self.low: dt.datetime | None = None
        #: The table's version the pieces stand for (None: they stand for nothing).
        self.version: int | None = None
        #: Batches that read the table (the others used the pieces).
        self.reads = 0

    def earlier(self, spark: SparkSession, since: dt.datetime) -> DataFrame:
        """First copies stored from ``since`` minus the watermark on (a batch's first store time)."""
        start = _utc(since) - self.watermark
        usable = self.version is not None and self.version == log_version(self.path) and start >= self.low
        if not usable:
            # The version first: a commit that lands during the read makes the next write see
            # a version other than this one's successor, and the pieces start again.
            self.version = log_version(self.path)
            self.reads += 1
            read = (spark.read.format("delta").load(self.path)
                    .where(F.col("storeTimestamp") >= F.lit(start))
                    .where(F.col("dedupKey").isNotNull() & F.col("retryOf").isNull())
                    .select(*COLUMNS).localCheckpoint(eager=True))
            newest = read.agg(F.max("storeTimestamp")).first()[0]
            newest = start if newest is None else _utc(newest)
            self.pieces, self.low = [(newest, read)], start
        return self._rows().where(F.col("storeTimestamp") >= F.lit(start))

    def _rows(self) -> DataFrame:
        return reduce(DataFrame.unionByName, [piece for _, piece in self.pieces])

    def wrote(self, firsts: DataFrame, since: dt.datetime, newest: dt.datetime, before: int | None,
              after: int | None) -> None:
        """Take a batch's first copies in, once its write made the table go from version ``before``
        to ``after``: the pieces stand for ``after`` only when no other commit came in between."""
        if before is None or before != self.version or after != before + 1:
            self.pieces, self.version = [], None
            return
        self.version = after
        start, newest = _utc(since) - self.watermark, _utc(newest)
        kept = [(n, p) for n, p in self.pieces if n >= start]
        dropped = [n for n, _ in self.pieces if n < start]
        if dropped:  # what they held is older than what is left complete
            self.low = max(self.low, max(dropped) + dt.timedelta(microseconds=1))
        self.pieces = kept + [(newest, firsts)]
        if len(self.pieces) > MAX_PIECES:
            # Rows before this batch's window go too: a later batch that needs them reads the table.
            self.low = max(self.low, start)
            merged = self._rows().where(F.col("storeTimestamp") >= F.lit(self.low)).localCheckpoint(eager=True)
            self.pieces = [(max(n for n, _ in self.pieces), merged)]
        else:
            # Kept as rows, not as the plan that made them: a plan with a join would be planned
            # (its small side broadcast: a Spark job) again by every batch that reads the pieces.
            self.pieces[-1] = (newest, firsts.localCheckpoint(eager=True))
