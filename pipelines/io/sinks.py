"""Idempotent Delta writes of decoded micro-batches: ``messages`` and ``quarantine``.

Each micro-batch is written once per table (:class:`msglake.pipelines.io.once.OnceWriter`): a
batch that Spark replays after a crash (written to Delta, checkpoint not yet committed) is
skipped, table by table, so no row is ever written twice.
"""
from __future__ import annotations

import datetime as dt
import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, functions as F

from msglake.errors import QualityRuleFailed
from msglake.pipelines.io.first_copies import INDEX as FIRST_COPIES_INDEX, ROWS as KEY_ROWS, FirstCopies, store_micros
from msglake.pipelines.io.once import OnceWriter, log_version
from msglake.quality import rules as R
from msglake.schemas import MESSAGES_TABLE, QUARANTINE_TABLE
from msglake.schemas.messages import DECODED_SCHEMA, DEDUP, DERIVED
from msglake.schemas.quarantine import QUARANTINE_DETAIL, QUARANTINE_LOCATION
from msglake.schemas.spark import to_spark
from msglake.transforms.dedup import (KEY_COLUMNS, RETRY_LOCATION, RetryRule, arrow_keys, dedup_key, in_sorted,
                                      mark_retries, repeated)


@dataclass
class BatchCounts:
    """What one micro-batch carried."""

    batch_id: int
    #: Segment bytes the batch's offsets cover (set by the job, which knows the checkpoint).
    read_bytes: int = 0
    #: Segments deleted before all their committed bytes were read: path -> [from, to or None].
    deleted: dict = field(default_factory=dict)
    messages: int = 0
    message_bytes: int = 0
    quarantined: int = 0
    quarantined_bytes: int = 0
    #: Bytes that hold no record by design (end-of-file blanks): counted, written nowhere.
    padding_bytes: int = 0
    #: Decoded messages each quality rule matched (warn: kept; quarantine: in ``quarantined``).
    rule_hits: dict = field(default_factory=dict)


@dataclass
class RunCounts:
    """Totals over the batches of one run (filled from the foreachBatch thread)."""

    batches: list[BatchCounts] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, b: BatchCounts) -> None:
        with self.lock:
            self.batches.append(b)

    def total(self, name: str) -> int:
        return sum(getattr(b, name) for b in self.batches)

    def rule_hits(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.batches:
            for rule, n in b.rule_hits.items():
                out[rule] = out.get(rule, 0) + n
        return out


#: Retry marking decides the keys that may repeat in one task (no shuffle) when they are at most this
#: many (a streaming trigger's usual load).
ONE_TASK_BATCH = 20_000
#: A batch whose messages come to fewer segment bytes than this per table partition it touches,
#: and to at most ``TINY_BATCH_BYTES`` in all (so that no large file of an uneven batch goes
#: uncompressed), writes its messages uncompressed: a trigger spread over many topics writes a
#: row or a few per file, and Snappy's set-up for each column of each file costs more than such
#: a file's rows. An append of 1,000 files of one row each (500 topics x 2 partitions, one task,
#: warm, the two ways alternated in one session) took 1.45-1.52 s with Snappy and 1.17-1.23 s
#: without, while such a file is mostly its footer either way. ``msglake optimize`` rewrites them
#: with Snappy: it Z-orders ``messages``, which rewrites every file, even one alone in its
#: partition. Known only with retry marking on (the default): the driver's pass counts them.
TINY_FILE_BYTES = 16 << 10
TINY_BATCH_BYTES = 4 << 20
#: A batch whose records that did not decode come to at most this many raw bytes writes them to
#: ``quarantine`` from the driver's pass (which decoded them for retry marking anyway) instead of
#: a second Spark scan of the whole batch; a larger one is scanned again. An Arrow batch of the
#: driver's pass keeps its broken records' bytes only up to ``DRIVER_QUARANTINE_CHUNK_BYTES``
#: (a broken region comes as rows of 1 MiB), so the pass never holds more than a sixteenth of a
#: batch's bytes (its Arrow batches are about 4 MiB of segment) on the way to that limit.
DRIVER_QUARANTINE_BYTES = 64 << 20
DRIVER_QUARANTINE_CHUNK_BYTES = 256 << 10
#: The columns of those records whose sums tell the write's from the driver's pass's (with their count).
_UNDECODED_SUMS = ("recordLength", "segmentPosition")
_UNCOMPRESSED = {"compression": "uncompressed"}

_DERIVED_NULLS = to_spark(pa.schema(DERIVED))
_DEDUP_NULLS = to_spark(pa.schema(DEDUP))
_QUARANTINE_LOCATION_COLUMNS = [f.name for f in QUARANTINE_LOCATION]
_QUARANTINE_COLUMNS = _QUARANTINE_LOCATION_COLUMNS + [f.name for f in QUARANTINE_DETAIL if f.name != "quarantinedAt"]


def row_kind():
    """``decoded``, ``quarantined``, ``held`` (decoded, but a quarantine-level quality rule matched)
    or ``padding`` (an accounting row: no reason, no message id). Needs the ``_checks`` column."""
    return (
        F.when(F.col("reason").isNotNull(), F.lit("quarantined"))
        .when(F.col("messageId").isNull(), F.lit("padding"))
        .when(R.held(), F.lit("held"))
        .otherwise(F.lit("decoded"))
    )


def _nulls(schema) -> list:
    return [F.lit(None).cast(f.dataType).alias(f.name) for f in schema]


class BatchPlan:
    """How a sink's micro-batches are checked, counted and split into the two tables.

    The column expressions are made once, with the plan: each pyspark function call is a JVM
    round trip or more, and a batch's plans need over a thousand such calls; making them again
    for every batch cost a small micro-batch about 0.25 s (bench_stream.py's freshness run).

    Parameters
    ----------
    rules : quality.rules.RuleContext
        Limits and policies of the quality rules.
    levels : dict
        Rule name -> level, for the rules that are not ``off`` (``quality.rules.active``).
    """

    def __init__(self, rules: R.RuleContext, levels: dict[str, str]):
        self.checks = R.violations(rules, levels)
        kind = row_kind()
        self.decoded, self.quarantined, self.held = (kind == k for k in ("decoded", "quarantined", "held"))
        self.metrics = _metrics(kind, levels)
        self.key = dedup_key()
        self.given_key = F.col("dedupKey")
        self.decoded_columns = [F.col(n) for n in DECODED_SCHEMA.names]
        self.dedup_nulls = _nulls(_DEDUP_NULLS)
        self.dedup_columns = [F.col(f.name) for f in _DEDUP_NULLS]
        self.no_retry = F.lit(None).cast(_DEDUP_NULLS["retryOf"].dataType).alias("retryOf")
        self.derived_nulls = _nulls(_DERIVED_NULLS)
        self.quarantine_columns = [F.col(c) for c in _QUARANTINE_COLUMNS]
        self.held_columns = [
            *[F.col(c) for c in _QUARANTINE_LOCATION_COLUMNS],
            R.held_reason().alias("reason"),
            F.lit(b"").alias("rawBytes"),
            R.first_held_rule().alias("rule"),
        ]
        self.no_rule = F.lit(None).cast("string").alias("rule")
        #: Messages rows (decoded, held by a rule or not): a write that finds fewer than the
        #: driver's pass did read a segment that went away in between (``DeltaSink.__call__``).
        self.framed = F.sum(F.when(kind.isin("decoded", "held"), 1).otherwise(0)).alias("framed")
        #: The records that did not decode, as :func:`undecoded_sums` tells those of the driver's pass.
        undecoded = kind == "quarantined"
        self.undecoded = [F.sum(F.when(undecoded, F.col(c).cast("long")).otherwise(0)).alias(f"undecoded:{c}")
                          for c in _UNDECODED_SUMS]
        self.undecoded.append(F.sum(F.when(undecoded, 1).otherwise(0)).alias("undecoded:rows"))

    def checked(self, df: DataFrame) -> DataFrame:
        """``df`` with the ``_checks`` column of the rules (``off`` ones not evaluated)."""
        return df.withColumn(R.CHECKS_COLUMN, self.checks)

    @staticmethod
    def stamped(df: DataFrame, batch_id: int, at: str) -> DataFrame:
        """``df`` with the batch's write time (column ``at``) and ``ingestBatchId`` on every row.

        They come from a one-row relation joined to the rows, not from literals: Spark writes a
        timestamp or bigint literal's value into the code it generates, so the write of every
        batch was generated and compiled anew (2 classes), and the JVM compiled that code to
        machine code again (benchmarks/bench_stamp.py, 1M RocketMQ messages, warm session: the
        JIT's compile time 10.4 -> 5.9 s a run, median). Read from the relation, the code is the
        same in every batch. The relation is an inline table: its row is in the plan, so
        broadcasting it runs no Spark job (a DataFrame made from Python rows is an RDD, and its
        broadcast was a job per write).
        """
        # Two integers of this process's own in the text (an inline table takes no parameter).
        now, batch = time.time_ns() // 1000, int(batch_id)
        stamp = df.sparkSession.sql(
            f"SELECT * FROM VALUES (timestamp_micros({now}), CAST({batch} AS BIGINT)) AS stamp(`{at}`, ingestBatchId)")
        return df.crossJoin(F.broadcast(stamp))

    def messages(self, df: DataFrame, batch_id: int, retries: DataFrame | None = None,
                 marked: bool = False) -> DataFrame:
        """Checked source rows -> the batch's ``messages`` rows, in the table's column order.

        With ``retries`` (retry marking on: the batch's retries, ``transforms.dedup.find_retries``),
        rows get their ``dedupKey`` and, the retries among them, ``retryOf``; ``marked`` without
        ``retries`` (marking on, the batch has no retry): their ``dedupKey`` only; otherwise both
        stay null. The key is the source's ``dedupKey`` column where it has one (its
        ``dedupKeys`` option), else made here (``transforms.dedup.dedup_key``).
        """
        given = (retries is not None or marked) and "dedupKey" in df.columns
        decoded = df.where(self.decoded).select(*self.decoded_columns, *([self.given_key] if given else []))
        key = self.given_key if given else self.key
        if retries is not None:
            decoded = mark_retries(decoded, retries, key)
        elif marked:
            decoded = decoded.select(*self.decoded_columns, key.alias("dedupKey"), self.no_retry)
        else:
            decoded = decoded.select("*", *self.dedup_nulls)
        return self.stamped(decoded, batch_id, "ingestedAt").select(
            *self.decoded_columns,
            "ingestedAt",
            "ingestBatchId",
            *self.dedup_columns,
            *self.derived_nulls,
        )

    def quarantine(self, df: DataFrame, batch_id: int, raw_reader=None, records: DataFrame | None = None) -> DataFrame:
        """Checked source rows -> the batch's ``quarantine`` rows, in the table's column order.
        Rows a quarantine-level rule holds are among them, their bytes read back by ``raw_reader``
        (msglake.pipelines.io.source.raw_record_reader). ``records``: the batch's records that did
        not decode, as the driver's pass found them (source columns); without it they are taken
        from ``df``, a scan of the whole batch."""
        undecoded = df.where(self.quarantined) if records is None else records
        quarantine = undecoded.select(*self.quarantine_columns, self.no_rule)
        if raw_reader is not None:
            # Only when rules held rows: the union scans (decodes) the batch once more.
            held = df.where(self.held).select(*self.held_columns)
            quarantine = quarantine.unionByName(held.mapInArrow(raw_reader, held.schema))
        return self.stamped(quarantine, batch_id, "quarantinedAt").select(
            *self.quarantine_columns, "quarantinedAt", "ingestBatchId", "rule"
        )


def _metrics(kind: Column, levels: dict[str, str]) -> list:
    """What a micro-batch is counted by: rows and bytes per kind (:func:`row_kind`), rule hits,
    first and last store time. Plain aggregates, so they serve both a counting pass (``agg``)
    and ``observe`` on the write."""

    def rows(*kinds):
        return F.sum(F.when(kind.isin(*kinds), 1).otherwise(0))

    def nbytes(*kinds):
        return F.sum(F.when(kind.isin(*kinds), F.col("recordLength")).otherwise(0))

    # A held row counts only for the rules that moved it, not as "kept" by a warn rule.
    hit_kinds = {name: ("decoded",) if level == "warn" else ("decoded", "held") for name, level in levels.items()}
    return [
        rows("decoded").alias("messages"), nbytes("decoded").alias("message_bytes"),
        rows("quarantined", "held").alias("quarantined"), nbytes("quarantined", "held").alias("quarantined_bytes"),
        nbytes("padding").alias("padding_bytes"),
        F.min(F.when(kind == "decoded", F.col("storeTimestamp"))).alias("since"),
        F.max(F.when(kind == "decoded", F.col("storeTimestamp"))).alias("newest"),
        *[F.sum(F.when(R.matched(name) & kind.isin(*k), 1).otherwise(0)).alias(f"rule:{name}")
          for name, k in hit_kinds.items()],
    ]


@dataclass
class BatchKeys:
    """What retry marking knows of a micro-batch from its rows decoded in the driver
    (``pipelines.io.source.DriverReader``), before Spark writes it: its messages' keys."""

    #: Each message row with a key (``first_copies.ROWS``: its key hash, then ``KEY_COLUMNS``).
    rows: pa.Table
    #: Message rows (decoded; a quality rule may still hold some back), their bytes, and how many
    #: table partitions (topic, partition) they go to.
    framed: int = 0
    message_bytes: int = 0
    table_partitions: int = 0
    #: The first and last store time of the rows with a key (None: there are none).
    since: dt.datetime | None = None
    newest: dt.datetime | None = None
    #: The records that did not decode (quarantine columns of the source schema); None: their
    #: raw bytes came to more than :data:`DRIVER_QUARANTINE_BYTES`, so they were not kept.
    undecoded: pa.Table | None = None

    @cached_property
    def hashes(self) -> np.ndarray:
        """``transforms.dedup.key_hash`` of each row."""
        return self.rows.column("keyHash").to_numpy()

    @cached_property
    def times(self) -> np.ndarray:
        """The store time of each row, in microseconds since the epoch."""
        return store_micros(self.rows.column("storeTimestamp"))


def chunk_keys(batch: pa.RecordBatch) -> tuple:
    """One Arrow batch of a micro-batch's source rows -> what :func:`batch_keys` gathers of it
    (run by the driver's reader, in its pool's processes for a large batch)."""
    messages = pc.and_(pc.is_null(batch.column("reason")), pc.is_valid(batch.column("messageId")))
    made = arrow_keys(batch)
    keyed = pc.and_(messages, pc.is_valid(made.column("keyHash")))
    rows = pa.table([made.column("keyHash"), made.column("dedupKey"), *[batch.column(c) for c in KEY_COLUMNS[1:]]],
                    schema=KEY_ROWS)
    if pc.sum(keyed).as_py() != len(rows):
        rows = rows.filter(keyed)
    spots = pa.table([batch.column("topic"), batch.column("partition")], names=["topic", "partition"])
    spots = spots.filter(messages).group_by(["topic", "partition"]).aggregate([])
    framed = pc.sum(messages).as_py() or 0
    nbytes = pc.sum(batch.column("recordLength").filter(messages)).as_py() or 0
    undecoded = pa.Table.from_batches([batch.select(_QUARANTINE_COLUMNS)]).filter(pc.is_valid(batch.column("reason")))
    if undecoded.column("rawBytes").nbytes > DRIVER_QUARANTINE_CHUNK_BYTES:
        undecoded = None
    return rows, framed, nbytes, set(zip(*spots.to_pydict().values())), undecoded


def undecoded_sums(table: pa.Table) -> dict[str, int]:
    """What the write observes of a batch's records that did not decode (``BatchPlan.undecoded``),
    of those the driver's pass kept: their count, and the sums of their lengths and positions."""
    return {"undecoded:rows": len(table),
            **{f"undecoded:{c}": int(pc.sum(table.column(c)).as_py() or 0) for c in _UNDECODED_SUMS}}


def rows_with_hashes(wanted: pa.Array, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of ``batch`` whose key hash is among ``wanted`` (run by the driver's reader, in
    its pool's processes for a large batch: a function of this module, which reaches them by name)."""
    return batch.filter(pc.fill_null(pc.is_in(arrow_keys(batch).column("keyHash"), wanted), False))


def batch_keys(chunks: list[tuple]) -> BatchKeys:
    """The :func:`chunk_keys` of a micro-batch's chunks as one :class:`BatchKeys`."""
    tables = [c[0] for c in chunks if len(c[0])]
    rows = pa.concat_tables(tables) if tables else KEY_ROWS.empty_table()
    spots = set().union(*(c[3] for c in chunks)) if chunks else set()
    out = BatchKeys(rows, sum(c[1] for c in chunks), sum(c[2] for c in chunks), len(spots))
    undecoded = [c[4] for c in chunks]
    if all(t is not None for t in undecoded) and sum(t.column("rawBytes").nbytes for t in undecoded) <= \
            DRIVER_QUARANTINE_BYTES:
        out.undecoded = pa.concat_tables(undecoded).combine_chunks() if undecoded else None
    if len(rows):
        low, high = pc.min_max(rows.column("storeTimestamp")).values()
        out.since, out.newest = low.as_py(), high.as_py()
    return out


class DeltaSink:
    """The ``foreachBatch`` function of the ingest job.

    Parameters
    ----------
    app_id : str
        Stable id of the writing job (one per source and checkpoint): its commits are known by it.
    messages_path, quarantine_path : str
        Table locations.
    dedup_watermark_seconds : int
        Producer retries within this many seconds of the first copy are marked; 0 turns
        marking off.
    rules : quality.rules.RuleContext, optional
        Limits and policies of the quality rules; default: no policies, default limits.
    levels : dict, optional
        Rule name -> level (``quality.rules`` of the settings); missing rules take their default.
    raw_reader : callable, optional
        ``msglake.pipelines.io.source.raw_record_reader`` of the source: needed to quarantine rows that a
        quarantine-level rule holds (without it such a batch fails rather than lose the bytes).
    checkpoint : str, optional
        The query's checkpoint, which bounds the search for a replayed batch's commit (``OnceWriter``).
    """

    def __init__(self, app_id: str, messages_path: str, quarantine_path: str, counts: RunCounts | None = None,
                 dedup_watermark_seconds: int = 0, rules: R.RuleContext | None = None,
                 levels: dict[str, str] | None = None, raw_reader=None, checkpoint: str | None = None):
        self.app_id = app_id
        self.writer = OnceWriter(app_id, checkpoint)
        self.firsts = FirstCopies(messages_path, dedup_watermark_seconds,
                                  index=None if checkpoint is None else os.path.join(checkpoint, FIRST_COPIES_INDEX),
                                  app_id=app_id)
        self.paths = {MESSAGES_TABLE.name: messages_path, QUARANTINE_TABLE.name: quarantine_path}
        self.counts = counts if counts is not None else RunCounts()
        self.watermark = dedup_watermark_seconds
        self.rules = rules if rules is not None else R.RuleContext({})
        self.levels = R.active(levels or {})
        self.raw_reader = raw_reader
        #: Batches whose retries no Spark job decided, as none of their keys could repeat.
        self.without_decision = 0

    def _append(self, df: DataFrame, table: str, batch_id: int, **options: str) -> bool:
        """Append the batch's rows to ``table`` (with the writer's ``options``); False when the batch
        was committed there before."""
        return self.writer.write(df, self.paths[table], batch_id, **options)

    def _held_may_differ(self) -> bool:
        """Whether a quarantine-level rule may hold one copy of a message and not another: then
        deciding its retries needs to know which copies stay out of ``messages``."""
        return any(level == "quarantine" and not R.RULES[name].same_for_copies for name, level in self.levels.items())

    def _retries(self, keys: BatchKeys, spark, rows: Callable) -> DataFrame | None:
        """The batch's retries (``RetryRule.retries``), None when it has none.

        The keys that may repeat are found in the driver (``transforms.dedup.repeated``), among
        the batch's keys and the hashes of the first copies kept since the batch's first store
        time minus the watermark (``FirstCopies``): usually none, and no Spark job runs. Otherwise
        Spark decides among those keys only: the batch's copies of them and their first copies
        in the table. When a rule may hold back one copy of a key and not another, the copies it
        holds are found first (their rows decoded again in the driver and checked by Spark): a
        held copy is no first copy, it never reaches ``messages``.
        """
        if keys.since is None:
            return None
        stored = self.firsts.hashes(spark, keys.since)
        maybe = repeated(keys.hashes, stored)
        if not len(maybe):
            self.without_decision += 1
            return None
        mine = keys.rows.filter(pc.is_in(keys.rows.column("keyHash"), pa.array(maybe)))
        copies = spark.createDataFrame(mine.select(list(KEY_COLUMNS)))
        if self._held_may_differ():
            copies = copies.join(self._held(spark, rows, maybe), on=list(RETRY_LOCATION), how="left_anti")
        in_table = maybe[in_sorted(maybe, stored)]
        earlier = self.firsts.rows(spark, keys.since, in_table) if len(in_table) else copies.limit(0)
        if len(mine) <= ONE_TASK_BATCH:
            copies, earlier = copies.coalesce(1), earlier.coalesce(1)
        from pyspark.sql import Observation

        found = Observation("msglake-retries")
        decided = self.retry_rule.decide(copies, earlier).observe(found, F.count("retryOf").alias("retries"))
        retries = self.retry_rule.retries(decided).localCheckpoint(eager=True)
        # None found: an empty relation the optimizer sees as such drops the write's join, where
        # kept rows cost a broadcast job.
        return retries if found.get["retries"] else retries.limit(0)

    def _held(self, spark, rows: Callable, maybe: np.ndarray) -> DataFrame:
        """The locations of the batch's messages with a key hash among ``maybe`` that a
        quarantine-level rule holds: their rows decoded again in the driver, checked by Spark."""
        picked = [b for b in rows(functools.partial(rows_with_hashes, pa.array(maybe))) if b.num_rows]
        if not picked:
            return spark.createDataFrame([], "partition int, segment string, segmentPosition bigint")
        df = self.plan.checked(spark.createDataFrame(pa.Table.from_batches(picked)))
        return df.where(self.plan.held).select(*RETRY_LOCATION)

    def finish(self, spark) -> list[str]:
        """After the query stopped: leave the first copies kept for retry marking to the next run
        of this checkpoint (see ``first_copies``). Returns notes for the run's summary."""
        if self.watermark > 0:
            self.firsts.save(spark)
        return self.firsts.notes

    @cached_property
    def plan(self) -> BatchPlan:
        """The batches' column expressions (made on first use: they need a running Spark)."""
        return BatchPlan(self.rules, self.levels)

    @cached_property
    def retry_rule(self) -> RetryRule:
        """How the batches' retries are decided, its expressions made once (on first use)."""
        return RetryRule(self.watermark)

    def checked(self, df: DataFrame) -> DataFrame:
        """``df`` with the ``_checks`` column of this sink's rules (``off`` ones not evaluated)."""
        return self.plan.checked(df)

    def _count(self, df: DataFrame) -> dict:
        """The batch's metrics from a pass of its own."""
        return df.agg(*self.plan.metrics).collect()[0].asDict()

    @staticmethod
    def _fill(counts: BatchCounts, row) -> None:
        for name in ("messages", "message_bytes", "quarantined", "quarantined_bytes", "padding_bytes"):
            setattr(counts, name, int(row[name] or 0))
        counts.rule_hits = {k[5:]: int(v) for k, v in row.items() if k.startswith("rule:") and v}

    def _needs_count_pass(self) -> bool:
        """Whether the batch must be counted before anything is written: a fail-level rule must stop
        the batch before its first write, and held rows need a raw reader. Otherwise the counts
        come from the messages write itself (one decode of the batch instead of two)."""
        levels = set(self.levels.values())
        return "fail" in levels or ("quarantine" in levels and self.raw_reader is None)

    def __call__(self, df: DataFrame, batch_id: int, rows: Callable | None = None) -> BatchCounts:
        """Write micro-batch ``batch_id``.

        Parameters
        ----------
        df : DataFrame
            The batch's source rows.
        rows : callable, optional
            With retry marking on, required: ``rows(each)`` -> ``[each(b) for b in the batch's
            Arrow batches]``, decoded in the driver (``DriverReader.map`` bound to the batch's
            offsets). The batch's retries are decided from their keys before Spark writes it, so
            Spark decodes the batch once: for its messages write, which counts it on the way.
        """
        spark = df.sparkSession
        df = self.checked(df)
        counts = BatchCounts(batch_id)
        keys = retries = None
        if self.watermark > 0:
            if rows is None:
                raise ValueError("retry marking (a dedup watermark above 0) needs the batch's rows read in the driver")
            keys = batch_keys(rows(chunk_keys))
            retries = self._retries(keys, spark, rows)
        if self._needs_count_pass():
            self._fill(counts, self._count(df))
            self._check_failures(df, batch_id, counts)
        from pyspark.sql import Observation

        seen = Observation(f"msglake-batch-{batch_id}")
        observed = df.observe(seen, *self.plan.metrics, self.plan.framed, *self.plan.undecoded)
        messages = self.plan.messages(observed, batch_id, retries, marked=keys is not None)
        records = None  # the batch's records that did not decode, from the driver's pass (pa.Table)
        tiny = (keys is not None and keys.message_bytes <= TINY_BATCH_BYTES
                and keys.message_bytes < TINY_FILE_BYTES * max(keys.table_partitions, 1))
        path = self.paths[MESSAGES_TABLE.name]
        before = log_version(path)
        # The messages write runs even when the batch turns out to hold no message (at most an
        # empty commit): whether it does is only known from the write itself.
        if self._append(messages, MESSAGES_TABLE.name, batch_id, **(_UNCOMPRESSED if tiny else {})):
            row = seen.get
            self._fill(counts, row)
            if keys is not None:
                # A write that found fewer messages than the driver's pass read a segment that
                # went away in between (retention): its keys are not what the table holds.
                whole = int(row["framed"] or 0) >= keys.framed
                # Taken from the driver when its pass saw what the write saw: the same messages
                # (no segment went away in between) and the same records that did not decode.
                if whole and keys.undecoded is not None and all(
                        int(row[k] or 0) == v for k, v in undecoded_sums(keys.undecoded).items()):
                    records = keys.undecoded
                # The batch's first-copy rows only where the pieces will take them (no other commit).
                firsts = self._first_copies(keys, retries, counts) if whole and before == self.firsts.version else None
                self.firsts.wrote(keys.since, keys.newest, before if whole else None, log_version(path), keys.hashes,
                                  keys.times, firsts)
        else:
            # The batch was committed before a crash, the checkpoint not: the plan never ran,
            # so nothing was observed. Count the batch on its own.
            self._fill(counts, self._count(df))
        if counts.quarantined:
            quarantine = self.plan.quarantine(df, batch_id, raw_reader=self._reader_for(counts),
                                              records=None if records is None else spark.createDataFrame(records))
            self._append(quarantine, QUARANTINE_TABLE.name, batch_id)
        self.counts.add(counts)
        return counts

    def _first_copies(self, keys: BatchKeys, retries: DataFrame | None, counts: BatchCounts) -> pa.Table | None:
        """The rows (``first_copies.ROWS``) of the first copies a batch wrote: its keyed rows but
        its retries (few: their locations come from the decision's checkpoint). None when a rule
        held rows of the batch back: those are no first copies, and which they are is not known
        here."""
        if self._held_hits(counts):
            return None
        if retries is None:
            return keys.rows
        located = retries.select(*RETRY_LOCATION).toArrow()
        if not len(located):
            return keys.rows
        # In the rows' own types (Spark may hand strings over as large_string, which a join refuses).
        located = located.cast(pa.schema([KEY_ROWS.field(c) for c in RETRY_LOCATION]))
        return keys.rows.join(located, keys=list(RETRY_LOCATION), join_type="left anti").select(KEY_ROWS.names)

    def _held_hits(self, counts: BatchCounts) -> int:
        """Hits of the quarantine-level rules in the batch (rows they hold back from ``messages``)."""
        return sum(counts.rule_hits.get(n, 0) for n, level in self.levels.items() if level == "quarantine")

    def _reader_for(self, counts: BatchCounts):
        return self.raw_reader if self._held_hits(counts) else None

    def _check_failures(self, df: DataFrame, batch_id: int, counts: BatchCounts) -> None:
        """Stop before anything of the batch is written when a rule that must fail the job matched,
        or when rows must be quarantined and their bytes cannot be read back."""
        failing = {n: counts.rule_hits[n] for n, level in self.levels.items() if level == "fail" and n in counts.rule_hits}
        held = self._held_hits(counts)
        if not failing and not (held and self.raw_reader is None):
            return
        if not failing:
            raise QualityRuleFailed(f"batch {batch_id}: {held} row(s) match quarantine-level rules but this "
                                      "sink cannot read raw bytes back (no raw_reader)")
        examples = (
            df.where(F.size(R.hits("fail")) > 0)
            .select("topic", "partition", "segment", "segmentPosition",
                    F.array_join(F.transform(R.hits("fail"), lambda c: F.concat_ws(": ", c["rule"], c["reason"])),
                                 "; ").alias("why"))
            .limit(5).collect()
        )
        lines = [f"  {r['topic']}/{r['partition']} {r['segment']}@{r['segmentPosition']}: {r['why']}" for r in examples]
        summary = ", ".join(f"{n} ({k} row(s))" for n, k in failing.items())
        raise QualityRuleFailed(
            f"micro-batch {batch_id}: fail-level quality rule(s) matched: {summary}; nothing of this batch was "
            "written and the checkpoint did not move. First rows:\n" + "\n".join(lines)
            + "\nFix the data or set the rule's level in quality.rules (warn, quarantine, off), then run again."
        )
