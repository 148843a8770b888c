"""Exactly-once Delta writes of a streaming query's numbered micro-batches.

Delta's own idempotent writes (the ``txnAppId``/``txnVersion`` writer options) look the app's
last version up in the table's state on every write: a state reconstruction of three Spark
jobs, about 0.35 s a write on this machine, and most of what a small micro-batch costs.

A batch can only be a replay as the first batch a query runs after it (re)starts: within a
run, Spark runs each batch id once, and a failed batch ends the run. So a :class:`OnceWriter`
asks the table once per run whether the batch was committed already, and then knows:

- every commit carries ``userMetadata`` ``"<app id>:<batch id>"``, and the run's first write
  to a table looks for the newest such commit of its app in the table's log (its commit files,
  newest first, stopping at commits older than the time Spark planned the batch, which its
  offsets file in the checkpoint records: an earlier commit cannot be this batch's);
- a table whose Delta log records the app's transaction at this batch or later (a lake written
  by an older msglake, Delta's ``txnAppId``/``txnVersion`` without ``userMetadata``) is judged by
  that record. Delta writes the apps' transaction versions into a commit's checksum file
  (``<version>.crc``, ``setTransactions``) whenever it knows all of them (up to 100 apps), so the
  first write reads them from the newest commit's checksum and writes without the options, which
  would make Delta rebuild the table's state to look them up. Where that checksum does not say
  (no local log, no checksum file or no ``setTransactions`` in it, a transaction retention set on
  the table), the first write passes the options and Delta judges; whether it skipped the write
  is read from the log's version, which a skipped write leaves where it was.

What the options also gave is Delta's check against another writer committing the same app's
batch at the same moment: two runs of one checkpoint that both start again from the batch a
crash left (Spark's offset log refuses a batch planned twice, not one replayed twice). So a
run's first write holds a lock on the checkpoint (``first-writes.lock``, ``flock``) from its look
at the log to its commit, and the other run, waiting, then finds that commit. That serialises
runs on one host, or on a file system whose locks reach every host; a checkpoint folder that
takes no lock (or none given) makes the first write pass the options as before. Delta's own
record of the app's transaction stays where the last write with the options left it: the
``userMetadata`` marks, looked for first, are what say a batch was written.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager

from pyspark.sql import DataFrame

#: Commit times (their log file's time, the file system's clock) are compared with the time the
#: driver planned the batch: a margin for two clocks.
CLOCK_MARGIN_SECONDS = 600


class OnceWriter:
    """Writes each micro-batch of one app (a query's stable id) to a Delta table at most once.

    Parameters
    ----------
    app_id : str
        Stable id of the writing query, the same across its restarts (the checkpoint's query id
        is part of it): commits are found by it.
    checkpoint : str, optional
        The query's checkpoint: the batch time in its ``offsets/<batch id>`` file bounds the history
        search. Without it the search reads back to the app's newest commit or the table's first.
    """

    def __init__(self, app_id: str, checkpoint: str | None = None):
        self.app_id = app_id
        self.checkpoint = checkpoint
        #: Table path -> the newest batch id this app is known to have committed there (-1: none).
        self._last: dict[str, int] = {}

    def write(self, df: DataFrame, path: str, batch_id: int, mode: str = "append", **options: str) -> bool:
        """Write ``df`` to the Delta table at ``path`` as batch ``batch_id``, unless that batch was
        committed there before. True when this call committed it."""
        writer = df.write.format("delta").mode(mode).option("userMetadata", commit_mark(self.app_id, batch_id))
        for key, value in options.items():
            writer = writer.option(key, value)
        known = self._last.get(path)
        if known is not None:  # a later batch of this run: new for sure once past the last
            if batch_id <= known:
                return False
            writer.save(path)
            self._last[path] = batch_id
            return True
        with first_writes(self.checkpoint) as serialised:
            known = self.last_committed(path, batch_id)
            if batch_id <= known:
                self._last[path] = known
                return False
            return self._first_write(writer, path, batch_id, serialised)

    def _first_write(self, writer, path: str, batch_id: int, serialised: bool) -> bool:
        """The run's first write to ``path``, its app's commits found not to hold ``batch_id``;
        ``serialised``: no other run of the checkpoint writes its first batch meanwhile."""
        before = log_version(path)
        recorded = None if before is None or not serialised else recorded_transaction(path, before, self.app_id)
        if recorded is not None:
            if batch_id > recorded:  # else Delta would have skipped it
                writer.save(path)
            self._last[path] = batch_id
            return batch_id > recorded
        writer.option("txnAppId", self.app_id).option("txnVersion", batch_id).save(path)
        after = log_version(path)
        self._last[path] = batch_id
        if before is not None and after == before:
            return False  # Delta skipped it: its log records this app at this batch or later
        if before is not None and after == before + 1:
            return True
        # Not a local log, or another writer committed meanwhile: ask the history.
        return self.last_committed(path, batch_id) == batch_id

    def last_committed(self, path: str, batch_id: int) -> int:
        """The newest batch id of this app among the table's commits that could hold ``batch_id``
        (-1 when there is none).

        Read from the local log's commit files, newest first, each commit's ``userMetadata`` and
        its file's time (what Delta's history reports as the commit time). Delta's own
        ``history()`` was a Spark job over the log, about 0.17 s a table: a scheduled semantics run
        wrote four tables, and paid it four times before its first batch."""
        newest = log_version(path)
        if newest is None:
            return -1
        oldest = self._not_before(batch_id)
        for version in range(newest, -1, -1):
            try:
                committed = os.stat(commit_file(path, version)).st_mtime
            except FileNotFoundError:
                return -1  # older commits were cleaned up with the log
            batch = marked_batch(commit_metadata(path, version), self.app_id)
            if batch is not None:
                return batch
            if oldest is not None and committed < oldest:
                return -1
        return -1

    def _not_before(self, batch_id: int) -> float | None:
        """Seconds since the epoch before which no commit can be batch ``batch_id``'s: when Spark
        planned it (``batchTimestampMs`` in its offsets file, which a copy of the checkpoint keeps,
        unlike the file's own time), less the margin. None when the checkpoint does not say."""
        if self.checkpoint is None:
            return None
        try:
            with open(os.path.join(self.checkpoint, "offsets", str(batch_id))) as f:
                f.readline()  # the log's version line
                planned = json.loads(f.readline())["batchTimestampMs"] / 1000
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return planned - CLOCK_MARGIN_SECONDS


def commit_mark(app_id: str, batch_id: int) -> str:
    """The ``userMetadata`` a :class:`OnceWriter` commit carries."""
    return f"{app_id}:{batch_id}"


def marked_batch(metadata: str | None, app_id: str | None) -> int | None:
    """The batch id of a commit's ``userMetadata`` when it is ``app_id``'s mark, else None."""
    prefix = f"{app_id}:"
    if app_id is None or metadata is None or not metadata.startswith(prefix) or not metadata[len(prefix):].isdigit():
        return None
    return int(metadata[len(prefix):])


def commit_file(path: str, version: int) -> str:
    """Where commit ``version`` of the Delta table at ``path`` is in its local log."""
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def checksum_file(path: str, version: int) -> str:
    """Where Delta's checksum of commit ``version`` of the table at ``path`` is in its local log."""
    return commit_file(path, version).removesuffix(".json") + ".crc"


def _actions(path: str, version: int):
    """The actions of commit ``version`` in a Delta table's local log, one dict each (raises
    OSError when there is no such commit, ValueError for a line that is no JSON)."""
    with open(commit_file(path, version)) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def commit_metadata(path: str, version: int) -> str | None:
    """The ``userMetadata`` of commit ``version`` in a Delta table's local log (None: no such
    commit, or none given); a :class:`OnceWriter` commit's is ``"<app id>:<batch id>"``."""
    try:
        for action in _actions(path, version):
            info = action.get("commitInfo")
            if info is not None:
                return info.get("userMetadata")
    except (OSError, ValueError):
        pass
    return None


#: The lock file in a checkpoint folder that serialises its runs' first writes (:func:`first_writes`).
FIRST_WRITES_LOCK = "first-writes.lock"


@contextmanager
def first_writes(checkpoint: str | None):
    """Within, no other process holds the first-writes lock of ``checkpoint`` (waiting for it); yields
    True, or False without a checkpoint folder that takes the lock (nothing is held)."""
    fd = None
    if checkpoint is not None and os.path.isdir(checkpoint):
        try:
            fd = os.open(os.path.join(checkpoint, FIRST_WRITES_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            # A folder that takes no lock (read-only, or a mount without flock) does so for every
            # run alike: all of them take the path that needs none.
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)  # and with it the lock


def recorded_transaction(path: str, version: int, app_id: str) -> int | None:
    """The transaction version Delta records for ``app_id`` (its ``txnVersion``; -1: none) at commit
    ``version`` of the table at ``path``, from that commit's checksum file; None when the file does
    not say: none in a local log, no ``setTransactions`` in it (Delta writes them only while it knows
    them all, up to 100 apps), or a ``delta.setTransactionRetentionDuration`` on the table (expired
    transactions leave the table's state by time, which the file does not replay)."""
    try:
        with open(checksum_file(path, version)) as f:
            checksum = json.load(f)
        transactions = checksum["setTransactions"]
        configuration = (checksum.get("metadata") or {}).get("configuration") or {}
        if not isinstance(transactions, list) or "delta.setTransactionRetentionDuration" in configuration:
            return None
        return max((int(t["version"]) for t in transactions if t["appId"] == app_id), default=-1)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def made_empty(path: str) -> bool:
    """Whether the Delta table at ``path`` is as it was made, without a row: its local log holds
    version 0 only, and that commit adds no file (False when the log cannot be read)."""
    if log_version(path) != 0:
        return False
    try:
        return not any("add" in action for action in _actions(path, 0))
    except (OSError, ValueError):
        return False


def log_version(path: str) -> int | None:
    """The newest version in a Delta table's log on a local file system (None: no log there)."""
    try:
        names = os.listdir(os.path.join(path, "_delta_log"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions, default=None)
