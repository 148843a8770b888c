"""The first copies of ``messages`` a producer retry could repeat, kept between micro-batches.

Retry marking (``transforms.dedup.RetryRule``) needs the first copies stored from a batch's first
store time minus the watermark on, later ones included (a copy stored before one of those is its
retry). Reading them from the table costs each batch a Delta snapshot, its file filtering and a
scan (about 0.6 s of a small micro-batch here). The ingest sink is usually the table's only
writer, so it keeps what it needs instead: the window it read once, plus the first copies each
of its batches wrote, as checkpointed pieces.

They stand for the table only while the table has no commit but the sink's own (its log's
newest version is the one the sink's last write made) and the batch's window starts where
they are complete; otherwise the batch reads the table, as before, and the pieces start again
from what it read.

A run's pieces are also left for the next run of the same query (:meth:`FirstCopies.save`, in
the checkpoint's ``first-copies`` folder): a scheduled run then starts from them instead of
reading the window from the table, which over a table of many small files costs seconds (7-9 s
measured with 1,000 queues). The next run takes them only when they still stand for the table:
its newest version is the one they were saved at (any commit since, by anyone, moves it), that
commit is still the one the sink made (its ``userMetadata``, ``"<app id>:<batch id>"``, the app
id holding the checkpoint's query id: a table made again from scratch has other commits), the
watermark is the same, and the rows read back are all there. Otherwise the run reads the table,
as before.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from functools import reduce
from typing import NamedTuple

import numpy as np
from pyspark.sql import DataFrame, SparkSession, functions as F

from msglake.pipelines.io.once import commit_metadata, log_version, marked_batch
from msglake.transforms.dedup import RETRY_LOCATION, key_hash

#: What ``transforms.dedup.retry_keys`` keeps of a row.
COLUMNS = ("dedupKey", "storeTimestamp", *RETRY_LOCATION)
#: More pieces than this are merged into one (a union of many plans costs planning time).
MAX_PIECES = 8
#: The folder of a checkpoint that keeps the pieces between runs, its description file, and the
#: version of that file's layout (an index of another layout is not read).
INDEX = "first-copies"
_META = "index.json"
_LAYOUT = 1


class Piece(NamedTuple):
    """Kept first copies, each stored from ``oldest`` to ``newest``."""

    oldest: dt.datetime
    newest: dt.datetime
    rows: DataFrame
    #: The ``transforms.dedup.key_hash`` of every row (more is harmless), sorted; None until
    #: :meth:`FirstCopies.hashes` needs them (a Spark job over the rows, once per piece).
    hashes: np.ndarray | None = None


def _sorted(hashes) -> np.ndarray:
    return np.sort(np.asarray(hashes, dtype=np.int64))


def _utc(t: dt.datetime) -> dt.datetime:
    """An instant to reckon with: Spark hands timestamps to Python as naive local times, whose
    arithmetic would be an hour off across a daylight-saving change."""
    return t.astimezone(dt.timezone.utc)


class FirstCopies:
    """First copies (a ``dedupKey`` and no ``retryOf``) of the ``messages`` table at ``path``."""

    def __init__(self, path: str, watermark_seconds: int, index: str | None = None, app_id: str | None = None):
        self.path = path
        self.watermark = dt.timedelta(seconds=watermark_seconds)
        #: Where the pieces are kept between runs (None: they are not), and the app id of the
        #: sink whose commits they follow.
        self.index, self.app_id = index, app_id
        self._tried_index = False
        #: Every first copy stored at or after ``low`` is in one of them.
        self.pieces: list[Piece] = []
        self.low: dt.datetime | None = None
        #: The table's version the pieces stand for (None: they stand for nothing).
        self.version: int | None = None
        #: Batches that read the table (the others used the pieces).
        self.reads = 0
        #: What went wrong with the saved index, for the run's summary (the run goes on without it).
        self.notes: list[str] = []

    def earlier(self, spark: SparkSession, since: dt.datetime) -> DataFrame:
        """First copies stored from ``since`` minus the watermark on (a batch's first store time)."""
        start = _utc(since) - self.watermark
        if not self._tried_index:
            self._tried_index = True
            self._load(spark)
        usable = self.version is not None and self.version == log_version(self.path) and start >= self.low
        if not usable:
            # The version before the read: a commit that lands during the read makes the next
            # write see a version other than this one's successor, and the pieces start again.
            version = log_version(self.path)
            self.version = None
            self.reads += 1
            read = (spark.read.format("delta").load(self.path)
                    .where(F.col("storeTimestamp") >= F.lit(start))
                    .where(F.col("dedupKey").isNotNull() & F.col("retryOf").isNull())
                    .select(*COLUMNS).localCheckpoint(eager=True))
            newest = read.agg(F.max("storeTimestamp")).first()[0]
            newest = start if newest is None else _utc(newest)
            self.pieces, self.low, self.version = [Piece(start, newest, read)], start, version
        return self._rows(start)

    def hashes(self, spark: SparkSession, since: dt.datetime) -> list[np.ndarray]:
        """The sorted ``transforms.dedup.key_hash`` values of the first copies :meth:`earlier`
        gives for ``since``, a piece each (more: a piece is not cut to the window, and an older
        row only makes a repeat look possible), for ``transforms.dedup.repeated``. A piece whose
        hashes are not known yet (read from the table or the saved index, or written by a batch
        that did not give them) is hashed by a Spark job, once."""
        self.earlier(spark, since)  # the pieces stand for the table from here on
        for i, p in enumerate(self.pieces):
            if p.hashes is None:
                column = p.rows.select(key_hash().alias("h")).toArrow().column("h")
                self.pieces[i] = p._replace(hashes=_sorted(column.to_numpy(zero_copy_only=False)))
        return [p.hashes for p in self.pieces]

    def _rows(self, start: dt.datetime) -> DataFrame:
        """The pieces' rows stored from ``start`` on. Only a piece that holds older rows is
        filtered: a filter's time is written into the code Spark generates for it, so each
        filtered piece costs every batch two compilations (about 7 ms each here), where an
        unfiltered one reuses its code."""
        return reduce(DataFrame.unionByName, [
            p.rows if p.oldest >= start else p.rows.where(F.col("storeTimestamp") >= F.lit(start))
            for p in self.pieces])

    def _complete(self) -> DataFrame:
        """The rows of the pieces from ``low`` on: those that every first copy since is among."""
        return self._rows(self.low)

    def wrote(self, firsts: DataFrame, since: dt.datetime, newest: dt.datetime, before: int | None,
              after: int | None, hashes: np.ndarray | None = None) -> None:
        """Take a batch's first copies in, once its write made the table go from version ``before``
        to ``after``: the pieces stand for ``after`` only when no other commit came in between.
        ``hashes``: the ``key_hash`` of every key of the batch (its first copies among them), when
        known.

        ``firsts`` must be kept rows (a checkpoint, or a filter over one), not a plan with a join:
        every later batch that reads the pieces would plan it again (its small side broadcast: a
        Spark job)."""
        if before is None or before != self.version or after != before + 1:
            self.pieces, self.version = [], None
            return
        self.version = None  # until the pieces are whole again (save() must not take half of them)
        start, newest = _utc(since) - self.watermark, _utc(newest)
        kept = [p for p in self.pieces if p.newest >= start]
        dropped = [p.newest for p in self.pieces if p.newest < start]
        if dropped:  # what they held is older than what is left complete
            self.low = max(self.low, max(dropped) + dt.timedelta(microseconds=1))
        self.pieces = kept + [Piece(_utc(since), newest, firsts, None if hashes is None else _sorted(hashes))]
        if len(self.pieces) > MAX_PIECES:
            # Rows before this batch's window go too: a later batch that needs them reads the table.
            self.low = max(self.low, start)
            # In a few partitions: a union keeps every partition of its parts, so a long stream's
            # merged piece grew by the partitions of every piece merged into it (a task each).
            parallelism = firsts.sparkSession.sparkContext.defaultParallelism
            merged = self._complete().coalesce(parallelism).localCheckpoint(eager=True)
            known = [p.hashes for p in self.pieces]
            hashes = None if any(h is None for h in known) else _sorted(np.concatenate(known))
            self.pieces = [Piece(self.low, max(p.newest for p in self.pieces), merged, hashes)]
        self.version = after

    def save(self, spark: SparkSession) -> bool:
        """Leave the pieces for the next run, once the query has stopped: True when they were kept
        (a failure to write them is noted in ``notes``).

        Kept only when they stand for the table's newest version, a commit of this sink; the rows
        are written first and the description that names them last, so a crash in between leaves
        the earlier index, which that newer commit makes stale, or none."""
        version = self.version
        if self.index is None or version is None or not self.pieces or version != log_version(self.path):
            return False
        made = commit_metadata(self.path, version)
        if marked_batch(made, self.app_id) is None:
            return False
        name = f"rows-{version}-{uuid.uuid4().hex[:8]}"
        rows = os.path.join(self.index, name)
        try:
            os.makedirs(self.index, exist_ok=True)
            kept = self._complete()
            kept.write.parquet(rows)
            meta = {"layout": _LAYOUT, "rows": name, "count": kept.count(), "version": version, "commit": made,
                    "watermarkSeconds": int(self.watermark.total_seconds()), "low": self.low.isoformat(),
                    "newest": max(p.newest for p in self.pieces).isoformat()}
            tmp = os.path.join(self.index, f".{_META}.{uuid.uuid4().hex[:8]}")
            with open(tmp, "w") as f:
                json.dump(meta, f)
            os.replace(tmp, os.path.join(self.index, _META))
        except Exception as e:  # noqa: BLE001 -- the run's data is committed; only the shortcut is lost
            shutil.rmtree(rows, ignore_errors=True)
            self.notes.append(f"the first copies kept for retry marking were not saved for the next run "
                              f"({_first_line(e)}); it will read them from the table")
            return False
        for old in os.listdir(self.index):  # the rows of earlier runs, and of saves cut short
            if old.startswith("rows-") and old != name:
                shutil.rmtree(os.path.join(self.index, old), ignore_errors=True)
        return True

    def _load(self, spark: SparkSession) -> None:
        """Start from the pieces the last run left, when they still stand for the table (see the
        module's docstring); anything else, an index unreadable or cut short included, leaves
        the pieces empty, and the first batch reads the table."""
        if self.index is None:
            return
        try:
            with open(os.path.join(self.index, _META)) as f:
                meta = json.load(f)
            version, rows, count = int(meta["version"]), os.path.join(self.index, meta["rows"]), int(meta["count"])
            low, newest = dt.datetime.fromisoformat(meta["low"]), dt.datetime.fromisoformat(meta["newest"])
            fits = (meta["layout"] == _LAYOUT and meta["watermarkSeconds"] == int(self.watermark.total_seconds())
                    and marked_batch(meta["commit"], self.app_id) is not None and os.path.isdir(rows))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return
        if not fits or version != log_version(self.path) or commit_metadata(self.path, version) != meta["commit"]:
            return
        try:
            kept = spark.read.parquet(rows).select(*COLUMNS).localCheckpoint(eager=True)
            whole = kept.count() == count
        except Exception as e:  # noqa: BLE001 -- a damaged index: the table has the same rows
            self.notes.append(f"the first copies saved in {self.index} did not read back ({_first_line(e)}); "
                              "they were read from the table")
            return
        if whole:
            self.pieces, self.low, self.version = [Piece(low, newest, kept)], low, version
        else:
            self.notes.append(f"the first copies saved in {self.index} are incomplete; they were read from the table")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
