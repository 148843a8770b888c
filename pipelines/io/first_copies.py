"""Which first copies ``messages`` holds near a micro-batch, kept between micro-batches as their
key hashes, so that retry marking reads the table only for keys a batch may repeat.

Retry marking (``transforms.dedup.RetryRule``) needs the first copies stored from a batch's first
store time minus the watermark on, later ones included (a copy stored before one of those is its
retry), but only of the keys the batch may repeat: usually none. The sink keeps the
``transforms.dedup.key_hash`` of every first copy its batches wrote (8 bytes each, in the
driver; with those of their other keyed rows, which only make a repeat look possible), as
pieces, and finds a batch's candidates among them (``transforms.dedup.repeated``) with no Spark
job. When some hash repeats, the rows of those keys' first copies (``ROWS``) come
from the driver too, for the first copies this run's batches wrote (:meth:`FirstCopies.wrote`
keeps them, up to :data:`ROWS_KEPT`), and from the table only for the others
(:meth:`FirstCopies.rows`): over a window of a few million rows the table's read was the cost
of a batch's retry decision (1.2-1.8 s per million rows of the window, the dedupKey strings).

The pieces stand for the table only while the table has no commit but the sink's own (its log's
newest version is the one the sink's last write made) and the batch's window starts where they
are complete; otherwise the batch reads the hashes of the window from the table, and the pieces
start again from what it read.

A run's pieces are also left for the next run of the same query (:meth:`FirstCopies.save`, in
the checkpoint's ``first-copies`` folder): a scheduled run then starts from them instead of
reading the window from the table, which over a table of many small files costs seconds (7-9 s
measured with 1,000 queues). The next run takes them only when they still stand for the table:
its newest version is the one they were saved at (any commit since, by anyone, moves it), that
commit is still the one the sink made (its ``userMetadata``, ``"<app id>:<batch id>"``, the app
id holding the checkpoint's query id: a table made again from scratch has other commits), the
watermark is the same, and the hashes read back are all there. Otherwise the run reads the
table, as before.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import uuid
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, functions as F

from msglake.pipelines.io.once import commit_metadata, log_version, made_empty, marked_batch
from msglake.schemas.source import SOURCE_SCHEMA
from msglake.transforms.dedup import KEY_COLUMNS, in_sorted, key_hash

#: More pieces than this are merged into one (each is searched for every batch's hashes).
MAX_PIECES = 8
#: The folder of a checkpoint that keeps the pieces between runs, its description file, and the
#: version of that file's layout (an index of another layout is not read).
INDEX = "first-copies"
_META = "index.json"
_LAYOUT = 2
#: The rows of first copies the sink keeps: the key hash, then ``transforms.dedup.KEY_COLUMNS``
#: in the source schema's types (as the sink's driver pass makes them).
ROWS = pa.schema([pa.field("keyHash", pa.int64()), pa.field("dedupKey", pa.string()),
                  *[SOURCE_SCHEMA.field(c) for c in KEY_COLUMNS[1:]]])
#: First copies whose rows are kept at most, in the driver: about 140 bytes each (668,811 of the
#: suite's 1M NSQ set took 95 MB, ``benchmarks/bench_retry_window.py``), so up to about 280 MB.
#: Older pieces keep only their hashes, and a repeat of one of those reads its rows from the table.
ROWS_KEPT = 2_000_000


class Piece(NamedTuple):
    """The sorted ``transforms.dedup.key_hash`` values of first copies stored from ``oldest`` to
    ``newest`` (more is harmless: an extra hash only makes a repeat look possible), and the
    store time of each (microseconds since the epoch), by which a merge drops the old ones."""

    oldest: dt.datetime
    newest: dt.datetime
    hashes: np.ndarray
    times: np.ndarray
    #: The rows (:data:`ROWS`) of its first copies, all of them; None: only their hashes are
    #: known (read from the table or a saved index, a batch a rule held rows of, rows let go to
    #: stay within :data:`ROWS_KEPT`, or a merge of such pieces).
    rows: pa.Table | None = None


def _piece(oldest: dt.datetime, newest: dt.datetime, hashes, times, rows: pa.Table | None = None) -> Piece:
    hashes, times = np.asarray(hashes, dtype=np.int64), np.asarray(times, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    return Piece(oldest, newest, hashes[order], times[order], rows)


def _merged(pieces: list[Piece], low: dt.datetime, start: dt.datetime) -> Piece:
    """``pieces`` as one from ``low`` on, without the first copies stored before ``start``; with
    rows when every one of them has its rows."""
    times = np.concatenate([p.times for p in pieces])
    young = times >= _micros(start)
    rows = _since(pa.concat_tables([p.rows for p in pieces]), start) if all(p.rows is not None for p in pieces) else None
    return _piece(low, max(p.newest for p in pieces), np.concatenate([p.hashes for p in pieces])[young], times[young],
                  rows)


def _since(rows: pa.Table, start: dt.datetime) -> pa.Table:
    """The rows (:data:`ROWS`) stored at or after ``start``."""
    return rows.filter(pc.greater_equal(rows.column("storeTimestamp"), pa.scalar(start)))


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _micros(t: dt.datetime) -> int:
    return (_utc(t) - EPOCH) // dt.timedelta(microseconds=1)


def store_micros(times: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Store times (an Arrow timestamp column) as microseconds since the epoch, as pieces keep them."""
    return times.cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)


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
        #: Batches that read the table's hashes (the others used the pieces), and batches that
        #: read first copies' rows from it (the others had them all in the pieces).
        self.reads = 0
        self.row_reads = 0
        #: What went wrong with the saved index, for the run's summary (the run goes on without it).
        self.notes: list[str] = []

    def hashes(self, spark: SparkSession, since: dt.datetime) -> list[np.ndarray]:
        """The sorted hashes of the first copies stored from ``since`` (a batch's first store
        time) minus the watermark on, a piece each (more: a piece is not cut to the window), for
        ``transforms.dedup.repeated``; read from the table when the pieces do not stand for it."""
        start = _utc(since) - self.watermark
        if not self._tried_index:
            self._tried_index = True
            self._load()
        usable = self.version is not None and self.version == log_version(self.path) and start >= self.low
        if not usable:
            # The version before the read: a commit that lands during the read makes the next
            # write see a version other than this one's successor, and the pieces start again.
            version = log_version(self.path)
            self.version = None
            if made_empty(self.path):
                # The table as made, without a row (an ingest's first run): nothing to read, and
                # no Spark job (0.4-0.6 s of a first micro-batch).
                times, hashes = np.array([], np.int64), np.array([], np.int64)
            else:
                self.reads += 1
                read = self._window(spark, start).select(key_hash().alias("h"), "storeTimestamp").toArrow()
                times = store_micros(read.column("storeTimestamp"))
                hashes = read.column("h").to_numpy(zero_copy_only=False)
            newest = start if not len(times) else EPOCH + dt.timedelta(microseconds=int(times.max()))
            piece = _piece(start, newest, hashes, times)
            self.pieces, self.low, self.version = [piece], start, version
        return [p.hashes for p in self.pieces]

    def _window(self, spark: SparkSession, start: dt.datetime) -> DataFrame:
        return (spark.read.format("delta").load(self.path)
                .where(F.col("storeTimestamp") >= F.lit(start))
                .where(F.col("dedupKey").isNotNull() & F.col("retryOf").isNull()))

    def rows(self, spark: SparkSession, since: dt.datetime, hashes: np.ndarray) -> DataFrame:
        """The first copies in the table stored from ``since`` minus the watermark on whose key
        hash is among ``hashes`` (``transforms.dedup.KEY_COLUMNS``), for ``RetryRule.decide``
        (right after :meth:`hashes` for the same batch, whose pieces stand for the table).

        A hash that only pieces with rows hold is answered from them; one that a piece of hashes
        alone holds is read from the table, all its first copies (a key's first copies may lie
        in several pieces: one per watermark they span)."""
        start = _utc(since) - self.watermark
        wanted = np.unique(np.asarray(hashes, dtype=np.int64))
        read = wanted[in_sorted(wanted, [p.hashes for p in self.pieces if p.rows is None])]
        kept_for = pa.array(np.setdiff1d(wanted, read, assume_unique=True))
        parts = [_since(p.rows.filter(pc.is_in(p.rows.column("keyHash"), kept_for)), start)
                 for p in self.pieces if p.rows is not None and len(kept_for)]
        kept = pa.concat_tables([t for t in parts if len(t)] or [ROWS.empty_table()]).select(list(KEY_COLUMNS))
        out = spark.createDataFrame(kept)
        if len(read):
            self.row_reads += 1
            asked = spark.createDataFrame(pa.table({"keyHash": pa.array(read, pa.int64())}))
            window = self._window(spark, start)
            out = out.unionByName(window.join(F.broadcast(asked), key_hash() == asked["keyHash"], "left_semi")
                                  .select(*KEY_COLUMNS))
        return out

    def wrote(self, since: dt.datetime | None, newest: dt.datetime | None, before: int | None, after: int | None,
              hashes: np.ndarray, times: np.ndarray, rows: pa.Table | None = None) -> None:
        """Take a batch's first copies in (``hashes``: the ``key_hash`` of its keys, the first
        copies among them, stored at ``times``, microseconds since the epoch, from ``since`` to
        ``newest``; None: it has no key), once its write made the table go from version
        ``before`` to ``after``: the pieces stand for ``after`` only when no other commit came
        in between. ``rows``: the rows (:data:`ROWS`) of exactly the first copies the batch
        wrote, when the sink knows them."""
        if before is None or before != self.version or after != before + 1:
            self.pieces, self.version = [], None
            return
        if since is None:
            self.version = after
            return
        start, newest = _utc(since) - self.watermark, _utc(newest)
        kept = [p for p in self.pieces if p.newest >= start]
        dropped = [p.newest for p in self.pieces if p.newest < start]
        if dropped:  # what they held is older than what is left complete
            self.low = max(self.low, max(dropped) + dt.timedelta(microseconds=1))
        self.pieces = kept + [_piece(_utc(since), newest, hashes, times, rows)]
        if len(self.pieces) > MAX_PIECES:
            # Merged, without the first copies stored before this batch's window: a later batch
            # that needs them reads the table. Pieces with rows and pieces of hashes alone are
            # merged apart: one of hashes alone among them would cost the others their rows.
            self.low = max(self.low, start)
            groups = ([p for p in self.pieces if p.rows is None], [p for p in self.pieces if p.rows is not None])
            self.pieces = [_merged(g, self.low, start) for g in groups if g]
        self._bound_rows()
        self.version = after

    def _bound_rows(self) -> None:
        """Let the oldest pieces' rows go once the pieces hold more than :data:`ROWS_KEPT`."""
        held = 0
        for i in reversed(range(len(self.pieces))):
            p = self.pieces[i]
            if p.rows is not None:
                held += len(p.rows)
                if held > ROWS_KEPT:
                    self.pieces[i] = p._replace(rows=None)

    def save(self, spark: SparkSession) -> bool:
        """Leave the pieces for the next run, once the query has stopped: True when they were kept
        (a failure to write them is noted in ``notes``).

        Kept only when they stand for the table's newest version, a commit of this sink; the hashes
        are written first and the description that names them last, so a crash in between leaves
        the earlier index, which that newer commit makes stale, or none."""
        version = self.version
        if self.index is None or version is None or not self.pieces or version != log_version(self.path):
            return False
        made = commit_metadata(self.path, version)
        if marked_batch(made, self.app_id) is None:
            return False
        name = f"hashes-{version}-{uuid.uuid4().hex[:8]}.npy"
        # One array: each first copy's hash and store time.
        kept = np.stack([np.concatenate([p.hashes for p in self.pieces]), np.concatenate([p.times for p in self.pieces])])
        try:
            os.makedirs(self.index, exist_ok=True)
            with open(os.path.join(self.index, name), "wb") as f:
                np.save(f, kept, allow_pickle=False)
            meta = {"layout": _LAYOUT, "hashes": name, "count": kept.shape[1], "version": version, "commit": made,
                    "watermarkSeconds": int(self.watermark.total_seconds()), "low": self.low.isoformat(),
                    "newest": max(p.newest for p in self.pieces).isoformat()}
            tmp = os.path.join(self.index, f".{_META}.{uuid.uuid4().hex[:8]}")
            with open(tmp, "w") as f:
                json.dump(meta, f)
            os.replace(tmp, os.path.join(self.index, _META))
        except OSError as e:  # the run's data is committed; only the shortcut is lost
            _remove(os.path.join(self.index, name))
            self.notes.append(f"the first copies kept for retry marking were not saved for the next run "
                              f"({_first_line(e)}); it will read them from the table")
            return False
        for old in os.listdir(self.index):  # the hashes of earlier runs, and of saves cut short
            if old.startswith(("hashes-", "rows-")) and old != name:
                _remove(os.path.join(self.index, old))
        return True

    def _load(self) -> None:
        """Start from the pieces the last run left, when they still stand for the table (see the
        module's docstring); anything else, an index unreadable or cut short included, leaves
        the pieces empty, and the first batch reads the table."""
        if self.index is None:
            return
        try:
            with open(os.path.join(self.index, _META)) as f:
                meta = json.load(f)
            version, hashes, count = int(meta["version"]), os.path.join(self.index, meta["hashes"]), int(meta["count"])
            low, newest = dt.datetime.fromisoformat(meta["low"]), dt.datetime.fromisoformat(meta["newest"])
            fits = (meta["layout"] == _LAYOUT and meta["watermarkSeconds"] == int(self.watermark.total_seconds())
                    and marked_batch(meta["commit"], self.app_id) is not None and os.path.isfile(hashes))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return
        if not fits or version != log_version(self.path) or commit_metadata(self.path, version) != meta["commit"]:
            return
        try:
            kept = np.load(hashes, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:  # a damaged index: the table has the same rows
            self.notes.append(f"the first copies saved in {self.index} did not read back ({_first_line(e)}); "
                              "they were read from the table")
            return
        if kept.dtype == np.int64 and kept.ndim == 2 and kept.shape == (2, count):
            self.pieces, self.low, self.version = [_piece(low, newest, kept[0], kept[1])], low, version
        else:
            self.notes.append(f"the first copies saved in {self.index} are incomplete; they were read from the table")


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            pass


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__
