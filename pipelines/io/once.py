"""Exactly-once Delta writes of a streaming query's numbered micro-batches.

Delta's own idempotent writes (the ``txnAppId``/``txnVersion`` writer options) look the app's
last version up in the table's state on every write: a state reconstruction of three Spark
jobs, about 0.35 s a write on this machine, and most of what a small micro-batch costs.

A batch can only be a replay as the first batch a query runs after it (re)starts: within a
run, Spark runs each batch id once, and a failed batch ends the run. So a :class:`OnceWriter`
asks the table once per run whether the batch was committed already, and then knows:

- every commit carries ``userMetadata`` ``"<app id>:<batch id>"``, and the run's first write
  to a table looks for the newest such commit of its app in the table's history (newest
  first, stopping at commits older than the batch's offsets file in the checkpoint, which
  Spark writes before the batch runs: an earlier commit cannot be this batch's);
- that first write also passes Delta's ``txnAppId``/``txnVersion``, so a table whose history
  shows no commit of the app but whose Delta log records its transaction (a lake written by
  an older msglake) is still judged by Delta, and the write records the app's version.
"""
from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession, functions as F

#: Commits are compared by the file system's clock (their log file's time) with the offsets
#: file's: a margin for two clocks, were the checkpoint and the lake on different stores.
CLOCK_MARGIN_SECONDS = 600


class OnceWriter:
    """Writes each micro-batch of one app (a query's stable id) to a Delta table at most once.

    Parameters
    ----------
    app_id : str
        Stable id of the writing query, the same across its restarts (the checkpoint's query id
        is part of it): commits are found by it.
    checkpoint : str, optional
        The query's checkpoint: its ``offsets/<batch id>`` file bounds the history search. Without
        it the search reads back to the app's newest commit or the table's first.
    """

    def __init__(self, app_id: str, checkpoint: str | None = None):
        self.app_id = app_id
        self.checkpoint = checkpoint
        #: Table path -> the newest batch id this app is known to have committed there (-1: none).
        self._last: dict[str, int] = {}

    def write(self, df: DataFrame, path: str, batch_id: int, mode: str = "append", **options: str) -> bool:
        """Write ``df`` to the Delta table at ``path`` as batch ``batch_id``, unless that batch was
        committed there before. True when this call committed it."""
        known = self._last.get(path)
        first = known is None
        if first:
            known = self.last_committed(df.sparkSession, path, batch_id)
        if batch_id <= known:
            self._last[path] = known
            return False
        writer = df.write.format("delta").mode(mode).option("userMetadata", f"{self.app_id}:{batch_id}")
        for key, value in options.items():
            writer = writer.option(key, value)
        if first:
            writer = writer.option("txnAppId", self.app_id).option("txnVersion", batch_id)
        writer.save(path)
        if first and known < 0 and self.last_committed(df.sparkSession, path, batch_id) != batch_id:
            # Delta skipped it: its log records this app at this batch or later. (With a commit
            # of the app found, Delta's record is at most that commit's batch: it cannot skip.)
            self._last[path] = batch_id
            return False
        self._last[path] = batch_id
        return True

    def last_committed(self, spark: SparkSession, path: str, batch_id: int) -> int:
        """The newest batch id of this app among the table's commits that could hold ``batch_id``
        (-1 when there is none)."""
        from delta.tables import DeltaTable

        if not os.path.isdir(os.path.join(path, "_delta_log")):
            return -1
        prefix = f"{self.app_id}:"
        oldest = self._not_before(batch_id)
        table = DeltaTable.forPath(spark, path)
        for limit in (16, 256, None):
            history = table.history(limit) if limit else table.history()
            rows = history.select(F.unix_millis("timestamp").alias("ms"), "userMetadata").orderBy(
                F.col("version").desc()).collect()
            for row in rows:
                meta = row["userMetadata"] or ""
                if meta.startswith(prefix) and meta[len(prefix):].isdigit():
                    return int(meta[len(prefix):])
                if oldest is not None and row["ms"] / 1000 < oldest:
                    return -1
            if limit is None or len(rows) < limit:
                return -1
        return -1

    def _not_before(self, batch_id: int) -> float | None:
        """Seconds since the epoch before which no commit can be batch ``batch_id``'s."""
        if self.checkpoint is None:
            return None
        try:
            return os.stat(os.path.join(self.checkpoint, "offsets", str(batch_id))).st_mtime - CLOCK_MARGIN_SECONDS
        except FileNotFoundError:
            return None


def log_version(path: str) -> int | None:
    """The newest version in a Delta table's log on a local file system (None: no log there)."""
    try:
        names = os.listdir(os.path.join(path, "_delta_log"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions, default=None)
