"""Idempotent Delta writes of decoded micro-batches: ``messages`` and ``quarantine``.

Each micro-batch is written once per table (:class:`msglake.pipelines.io.once.OnceWriter`): a
batch that Spark replays after a crash (written to Delta, checkpoint not yet committed) is
skipped, table by table, so no row is ever written twice.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, functions as F

from msglake.errors import QualityRuleFailed
from msglake.pipelines.io.first_copies import INDEX as FIRST_COPIES_INDEX, FirstCopies
from msglake.pipelines.io.once import OnceWriter, log_version
from msglake.quality import rules as R
from msglake.schemas import MESSAGES_TABLE, QUARANTINE_TABLE
from msglake.schemas.messages import DECODED_SCHEMA, DEDUP, DERIVED
from msglake.schemas.quarantine import QUARANTINE_DETAIL, QUARANTINE_LOCATION
from msglake.schemas.spark import to_spark
from msglake.transforms.dedup import (RetryRule, dedup_key, key_hash, mark_retries, repeat_candidates, repeated,
                                      retry_keys)


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


#: Retry marking for a batch of at most this many messages broadcasts its keys (about 100 bytes
#: each), and for one of at most ``ONE_TASK_BATCH`` decides in one task (``DeltaSink._retries``).
SMALL_BATCH = 200_000
ONE_TASK_BATCH = 20_000
#: A batch of at most this many segment bytes (a streaming trigger's usual load) is kept whole by
#: its first pass, and written from those rows: decoding it again would cost the write a Python
#: task, about 0.1 s however small the batch; a larger one is decoded again (see ``__call__``).
KEEP_BATCH_BYTES = 4 << 20
#: A larger batch has the first copies of its repeated keys broadcast when its keys that may
#: repeat (``transforms.dedup.repeat_candidates``, or ``repeated`` for a kept batch) are no more
#: than this many (each first copy about 150 bytes in the driver); otherwise its keys are
#: shuffled to their first copies.
BROADCAST_REPEATS = 200_000
#: A batch counted before its write (retry marking on, the default) whose messages come to fewer
#: segment bytes than this per table partition it touches, and to at most ``KEEP_BATCH_BYTES`` in
#: all (so that no large file of an uneven batch goes uncompressed), writes its messages
#: uncompressed: a trigger spread over many topics writes a row or a few per file, and Snappy's
#: set-up for each column of each file costs more than such a file's rows. An append of 1,000
#: files of one row each (500 topics x 2 partitions, one task, warm, the two ways alternated in
#: one session) took 1.45-1.52 s with Snappy and 1.17-1.23 s without, while such a file is mostly
#: its footer either way. ``msglake optimize`` rewrites them with Snappy: it Z-orders ``messages``,
#: which rewrites every file, even one alone in its partition.
TINY_FILE_BYTES = 16 << 10
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
        #: The checks of a write that decodes a batch counted before (``DeltaSink.__call__``):
        #: its rule hits are known, so only the rules that hold rows back are evaluated, and
        #: none when the count found no row held (an empty array Spark folds away).
        self.holding_checks = R.violations(rules, {n: level for n, level in levels.items() if level == "quarantine"})
        self.no_checks = R.violations(rules, {})
        kind = row_kind()
        self.decoded, self.quarantined, self.held = (kind == k for k in ("decoded", "quarantined", "held"))
        self.metrics = _metrics(kind, levels)
        self.key = dedup_key()
        self.now = F.current_timestamp()
        self.decoded_columns = [F.col(n) for n in DECODED_SCHEMA.names]
        self.dedup_nulls = _nulls(_DEDUP_NULLS)
        self.dedup_columns = [F.col(f.name) for f in _DEDUP_NULLS]
        self.derived_nulls = _nulls(_DERIVED_NULLS)
        self.quarantine_columns = [F.col(c) for c in _QUARANTINE_COLUMNS]
        self.held_columns = [
            *[F.col(c) for c in _QUARANTINE_LOCATION_COLUMNS],
            R.held_reason().alias("reason"),
            F.lit(b"").alias("rawBytes"),
            R.first_held_rule().alias("rule"),
        ]
        self.no_rule = F.lit(None).cast("string").alias("rule")
        #: What a pass that counts the batch before its write takes: the metrics and about how
        #: many table partitions (topic, partition) its messages go to (``TINY_FILE_BYTES``).
        self.count_metrics = [*self.metrics, F.approx_count_distinct(
            F.when(self.decoded, F.struct("topic", "partition"))).alias("tablePartitions")]
        #: The ``key_hash`` of each of a batch's keys, collected by the first pass of a batch it
        #: keeps (``KEEP_BATCH_BYTES``): which of its keys may repeat is then found in the driver.
        #: Not for a larger batch: collecting 1.19M hashes cost a batch of the RocketMQ benchmark
        #: set 4-8 s more than the Spark aggregate that finds them (``transforms.dedup.repeat_candidates``).
        self.key_hashes = F.collect_list(
            F.when(self.decoded & self.key.isNotNull(), key_hash(self.key))).alias("keyHashes")

    def checked(self, df: DataFrame, checks: Column | None = None) -> DataFrame:
        """``df`` with the ``_checks`` column of the rules (``off`` ones not evaluated), or of
        ``checks`` (``holding_checks``, ``no_checks``)."""
        return df.withColumn(R.CHECKS_COLUMN, self.checks if checks is None else checks)

    def keys(self, df: DataFrame) -> DataFrame:
        """The narrow rows retry marking needs of the batch's messages (``transforms.dedup.retry_keys``)."""
        return retry_keys(df.where(self.decoded), self.key)

    def split(self, df: DataFrame, batch_id: int, retries: DataFrame | None = None,
              raw_reader=None) -> tuple[DataFrame, DataFrame]:
        """Checked source rows -> (messages rows, quarantine rows), each in its table's column order.

        With ``retries`` (retry marking on: the batch's retries, ``transforms.dedup.find_retries``),
        rows get their ``dedupKey`` and, the retries among them, ``retryOf``; otherwise both stay
        null. Rows a quarantine-level rule holds go to quarantine, their bytes read back by
        ``raw_reader`` (msglake.pipelines.io.source.raw_record_reader).
        """
        batch = F.lit(batch_id).cast("bigint")
        decoded = df.where(self.decoded).select(*self.decoded_columns)
        if retries is not None:
            decoded = mark_retries(decoded, retries, self.key)
        else:
            decoded = decoded.select("*", *self.dedup_nulls)
        messages = decoded.select(
            *self.decoded_columns,
            self.now.alias("ingestedAt"),
            batch.alias("ingestBatchId"),
            *self.dedup_columns,
            *self.derived_nulls,
        )
        quarantine = df.where(self.quarantined).select(*self.quarantine_columns, self.no_rule)
        if raw_reader is not None:
            # Only when rules held rows: the union scans (decodes) the batch once more.
            held = df.where(self.held).select(*self.held_columns)
            quarantine = quarantine.unionByName(held.mapInArrow(raw_reader, held.schema))
        return messages, quarantine.select(
            *self.quarantine_columns, self.now.alias("quarantinedAt"), batch.alias("ingestBatchId"), "rule"
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
    small_batch : int
        Retry marking plans a batch of at most this many messages as a small one (``_retries``;
        0: every batch by the general plan).
    """

    def __init__(self, app_id: str, messages_path: str, quarantine_path: str, counts: RunCounts | None = None,
                 dedup_watermark_seconds: int = 0, rules: R.RuleContext | None = None,
                 levels: dict[str, str] | None = None, raw_reader=None, checkpoint: str | None = None,
                 small_batch: int = SMALL_BATCH):
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
        self.small_batch = small_batch
        #: Batches whose retries were decided without Spark (``_retries``).
        self.decided_in_driver = 0
        #: Batches whose retries no Spark job decided, as none of their keys could repeat: found by
        #: the driver (also counted above) or by a Spark aggregate (``_retries``).
        self.without_decision = 0

    def _append(self, df: DataFrame, table: str, batch_id: int, **options: str) -> bool:
        """Append the batch's rows to ``table`` (with the writer's ``options``); False when the batch
        was committed there before."""
        return self.writer.write(df, self.paths[table], batch_id, **options)

    def _first_pass(self, df: DataFrame, batch_id: int, keep: bool, spread: bool = True
                    ) -> tuple[dict, DataFrame | None, DataFrame]:
        """One decode of the batch before anything is written: its metrics, the rows retry
        marking needs (``transforms.dedup.retry_keys``; None when marking is off) and the batch
        to write. With ``keep``, the batch's rows are kept (its keys and write read them), and with
        retry marking on the metrics hold its keys' hashes (``keyHashes``); otherwise only its keys
        are kept, and the write decodes the batch again. ``spread``: also estimate how many table
        partitions its messages go to (``TINY_FILE_BYTES``)."""
        from pyspark.sql import Observation

        seen = Observation(f"msglake-count-{batch_id}")
        metrics = self.plan.count_metrics if spread else self.plan.metrics
        if self.watermark > 0 and keep:
            metrics = [*metrics, self.plan.key_hashes]
        observed = df.observe(seen, *metrics)
        if keep:
            df = observed.localCheckpoint(eager=True)
            keys = self.plan.keys(df) if self.watermark > 0 else None
        elif self.watermark > 0:
            keys = self.plan.keys(observed).localCheckpoint(eager=True)
        else:
            return self._count(df), None, df
        return seen.get, keys, df

    def _retries(self, keys: DataFrame, since, messages: int, batch_id: int,
                 hashes: np.ndarray | None) -> tuple[DataFrame, int]:
        """The batch's keys with ``retryOf`` (``transforms.dedup.RetryRule``), and how many of
        them are retries: its keys against themselves and the first copies stored from the batch's
        first store time minus the watermark on (none when the batch holds no message).

        First the keys that may repeat are found: by the driver (``transforms.dedup.repeated``)
        from the keys' hashes (``hashes``, collected by the first pass of a kept batch) and the
        kept first copies' hashes; for a larger batch (``hashes`` None) by a Spark aggregate
        (``transforms.dedup.repeat_candidates``). With none (the usual case) every key is a first
        copy, and no Spark job decides that (for a kept batch two jobs, 0.25-0.48 s of a streaming
        trigger's ~0.9 s batch): those rows are the batch's own kept rows, or its kept keys.
        Otherwise Spark decides, and the result is kept (a checkpoint; the retries are observed
        as it is made).

        A batch of at most ``small_batch`` messages has its keys broadcast to cut the window down
        to the first copies it can repeat: the window holds every first copy of the last
        ``watermark`` seconds, which the general plan shuffles whole on every batch. One of at most
        ``ONE_TASK_BATCH`` (a streaming trigger's usual load) is then decided in one task: the
        window's rows and the keys each in one partition (coalesced), so no shuffle, and the
        only other Spark job is the keys' broadcast. Measured (``local[2]``, keys / first copies
        in the window, general plan -> this): 600 / 180K 0.46 -> 0.17 s, 600 / 2M 1.9 -> 0.24 s,
        20K / 2M 2.1 -> 0.31 s, 200K / 2M 2.4 -> 0.64 s; at 200K / 180K, 0.61 vs 0.62 s, while
        one task there took 0.70 s.

        A larger batch has only the copies of the keys that may repeat grouped to their first,
        which is broadcast back to the keys, instead of every key grouped by a sort and shuffled
        again to be joined.
        """
        spark = keys.sparkSession
        maybe = None
        if hashes is not None:
            maybe = repeated(hashes, self.firsts.hashes(spark, since) if since is not None else ())
            if not len(maybe):
                # These rows are a projection of the batch's kept rows (its whole checkpoint, at
                # most KEEP_BATCH_BYTES): the first-copy pieces hold that checkpoint until they
                # are merged (MAX_PIECES batches), a few MiB each, instead of a narrow copy's job.
                self.decided_in_driver += 1
                self.without_decision += 1
                return self.retry_rule.none(keys), 0
        earlier = self.firsts.earlier(spark, since) if since is not None else keys.limit(0)
        candidates = None
        if messages <= self.small_batch:
            earlier = earlier.join(F.broadcast(keys.select("dedupKey")), "dedupKey", "left_semi")
            if messages <= ONE_TASK_BATCH:
                earlier, keys = earlier.coalesce(1), keys.coalesce(1)
        elif maybe is not None:
            if len(maybe) <= BROADCAST_REPEATS:
                candidates = spark.createDataFrame(pa.table({"keyHash": maybe}))
        else:
            candidates = repeat_candidates(keys, earlier).localCheckpoint(eager=True)
            repeats = candidates.count()
            if not repeats:
                # As above, from Spark's aggregate: the rows are the batch's kept keys.
                self.without_decision += 1
                return self.retry_rule.none(keys), 0
            if repeats > BROADCAST_REPEATS:
                candidates = None
        from pyspark.sql import Observation

        found = Observation(f"msglake-retries-{batch_id}")
        decided = (self.retry_rule.decide(keys, earlier, candidates)
                   .observe(found, F.count("retryOf").alias("retries")).localCheckpoint(eager=True))
        return decided, found.get["retries"]

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
        return df.agg(*self.plan.count_metrics).collect()[0].asDict()

    @staticmethod
    def _fill(counts: BatchCounts, row) -> None:
        for name in ("messages", "message_bytes", "quarantined", "quarantined_bytes", "padding_bytes"):
            setattr(counts, name, int(row[name] or 0))
        counts.rule_hits = {k[5:]: int(v) for k, v in row.items() if k.startswith("rule:") and v}

    def _needs_count_pass(self) -> bool:
        """Whether the batch must be counted before anything is written: a fail-level rule must stop
        the batch before its first write, retry marking needs the batch's first store time, and held
        rows need a raw reader. Otherwise the counts come from the messages write itself (one decode
        of the batch instead of two)."""
        levels = set(self.levels.values())
        return self.watermark > 0 or "fail" in levels or ("quarantine" in levels and self.raw_reader is None)

    def __call__(self, df: DataFrame, batch_id: int, batch_bytes: int | None = None) -> BatchCounts:
        """Write micro-batch ``batch_id``; ``batch_bytes``: the segment bytes it covers, when known
        (a batch of at most ``KEEP_BATCH_BYTES`` is decoded once, see below)."""
        # A large batch is not kept: reading Spark's copy of these rows (big binary and map
        # columns) costs more than decoding the segment bytes again (measured: 2.2x slower for
        # the write). So it is decoded once for messages (counted on the way by observe), once
        # more for quarantine rows only when there are some, and once before both when a count
        # pass is needed (see _needs_count_pass); with retry marking on, that pass also keeps the
        # batch's narrow retry keys, from which its retries are decided without another decode.
        # A small batch's count pass keeps all its rows instead (KEEP_BATCH_BYTES).
        source = df
        df = self.checked(df)
        counts = BatchCounts(batch_id)
        if not self._needs_count_pass():
            return self._write_observed(df, batch_id, counts)
        keep = batch_bytes is not None and batch_bytes <= KEEP_BATCH_BYTES
        # Only a batch of at most KEEP_BATCH_BYTES of messages may be written uncompressed, and a
        # batch's messages are no more than its bytes: a larger one needs no estimate of its spread
        # (an approx_count_distinct, ~0.2 s of a first pass over 1.19M RocketMQ rows, warm).
        spread = batch_bytes is None or batch_bytes <= KEEP_BATCH_BYTES
        row, keys, df = self._first_pass(df, batch_id, keep, spread)
        self._fill(counts, row)
        self._check_failures(df, batch_id, counts)
        if not keep:
            # The write decodes the batch again, and its rule hits are counted: evaluating the
            # warn-level rules once more would only cost (one batch of 1.19M RocketMQ rows, the
            # default rules, none held; its write, warm: 17.1-18.4 s with every rule, 14.5-14.6 s).
            df = self.plan.checked(source, self.plan.holding_checks if self._held(counts) else self.plan.no_checks)
        decided = retries = hashes = None
        if keys is not None:
            if keep:
                hashes = np.asarray(row["keyHashes"], dtype=np.int64)
            decided, found = self._retries(keys, row["since"], counts.messages, batch_id, hashes)
            retries = self.retry_rule.retries(decided)
            if not found:
                # The usual case. An empty relation the optimizer sees as such: it drops the join,
                # where kept rows (or rows the driver holds, an RDD too) cost a broadcast job.
                retries = retries.limit(0)
        messages, quarantine = self.plan.split(df, batch_id, retries, self._reader_for(counts))
        if counts.messages:
            from pyspark.sql import Observation

            path = self.paths[MESSAGES_TABLE.name]
            before = log_version(path)
            wrote = Observation(f"msglake-written-{batch_id}")
            spread = row.get("tablePartitions") or 1
            tiny = counts.message_bytes <= KEEP_BATCH_BYTES and counts.message_bytes < TINY_FILE_BYTES * spread
            options = _UNCOMPRESSED if tiny else {}
            if self._append(messages.observe(wrote, F.count(F.lit(1)).alias("rows")), MESSAGES_TABLE.name, batch_id,
                            **options):
                written = wrote.get["rows"]
                if written < counts.messages:
                    # A segment vanished between the passes (retention): the write decoded loss
                    # rows instead of its messages, so the quarantine write must run to keep them.
                    counts.messages = written
                    counts.quarantined = max(counts.quarantined, 1)
                    before = None  # nor are its keys what the table holds
                if decided is not None:
                    firsts = self.retry_rule.firsts(decided)
                    self.firsts.wrote(firsts, row["since"], row["newest"], before, log_version(path), hashes)
        if counts.quarantined:
            self._append(quarantine, QUARANTINE_TABLE.name, batch_id)
        self.counts.add(counts)
        return counts

    def _held(self, counts: BatchCounts) -> int:
        """Hits of the quarantine-level rules in the batch (rows they hold back from ``messages``)."""
        return sum(counts.rule_hits.get(n, 0) for n, level in self.levels.items() if level == "quarantine")

    def _reader_for(self, counts: BatchCounts):
        return self.raw_reader if self._held(counts) else None

    def _write_observed(self, df: DataFrame, batch_id: int, counts: BatchCounts) -> BatchCounts:
        """One pass: the messages write counts the batch as it goes.

        The messages write runs even when the batch turns out to hold no message (at most an empty
        commit): whether it does is only known from the write itself.
        """
        from pyspark.sql import Observation

        seen = Observation(f"msglake-batch-{batch_id}")
        messages, _ = self.plan.split(df.observe(seen, *self.plan.metrics), batch_id)
        if self._append(messages, MESSAGES_TABLE.name, batch_id):
            self._fill(counts, seen.get)
        else:
            # The batch was committed before a crash, the checkpoint not: the plan never ran,
            # so nothing was observed. Count the batch on its own.
            self._fill(counts, self._count(df))
        if counts.quarantined:
            _, quarantine = self.plan.split(df, batch_id, raw_reader=self._reader_for(counts))
            self._append(quarantine, QUARANTINE_TABLE.name, batch_id)
        self.counts.add(counts)
        return counts

    def _check_failures(self, df: DataFrame, batch_id: int, counts: BatchCounts) -> None:
        """Stop before anything of the batch is written when a rule that must fail the job matched,
        or when rows must be quarantined and their bytes cannot be read back."""
        failing = {n: counts.rule_hits[n] for n, level in self.levels.items() if level == "fail" and n in counts.rule_hits}
        held = self._held(counts)
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
