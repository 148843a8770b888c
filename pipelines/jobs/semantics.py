"""``msglake semantics``: the semantics engine as an incremental replay over the ``messages`` stream.

Each micro-batch of the Delta stream of ``messages`` moves the watermark ``W`` to the newest
``storeTimestamp`` seen minus ``--lateness`` and evaluates, with the replay's own rounds
(:mod:`msglake.pipelines.jobs.evaluate`) at ``W``:

- the new messages stored by ``W``;
- the copies still pending from earlier batches that may change by ``W``: due (their
  release or fate time has come), named by a consumer event or passed by a consumer-offset
  snapshot since the last watermark, chained with a new RocketMQ ``%RETRY%``/``%DLQ%``
  record, or in a coupled topic (overflow, expiry at the head only: one copy's fate depends
  on the others', so all of them are evaluated together).

It appends the state changes after the last watermark to ``message_events`` and the copies
this batch dead-lettered to ``dead_letters`` (``asOf`` null), and rewrites the pending set:
the copies live at ``W`` with when they are next due, the messages stored after ``W``, the
topics' first arrivals and ``W`` itself, a Delta table next to the checkpoint
(``<lake>/_checkpoints/semantics-pending``). A copy that only new input can change (ready,
nothing due: it waits for a consumer, :func:`dormant`) is appended once to another table,
``semantics-dormant``, and read again only by a batch whose consumer events, offset snapshots
or retry records name it. Every write is made once per batch id
(:class:`msglake.pipelines.io.once.OnceWriter`): a batch run again after a crash writes nothing twice.

Why this equals a replay: a copy that left its topic by the last watermark cannot change
again, and in a coupled partition the copies live at the last watermark are exactly its
backlog then, so evaluating them with what arrived since gives the replay's fates from the
last watermark on (tests/pipelines/test_semantics_stream.py checks the two logs equal on
random scenarios). Late input (a message stored, or a consumer event timed, at or before a
watermark already passed) is evaluated when it arrives and counted; in a coupled topic it can
no longer change the fates logged before it.
"""
from __future__ import annotations

import datetime as dt
import operator
import os
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, functions as F

from msglake.errors import LakeError
from msglake.pipelines.io import checkpoint as cp
from msglake.pipelines.io.catalog import add_missing_properties, ensure_table
from msglake.pipelines.io.once import OnceWriter, commit_mark, commit_metadata, log_version
from msglake.pipelines.jobs.evaluate import broadcast_distinct, evaluate_copies
from msglake.pipelines.jobs.running import wait_or_stop
from msglake.pipelines.session import SMALL_JOB_ROWS, setting, sized_for
from msglake.pipelines.settings import Settings, policy_dicts
from msglake.schemas import MESSAGES_TABLE
from msglake.schemas.semantics import CONSUMER_EVENTS_TABLE, DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE
from msglake.schemas.tables import stats_columns
from msglake.transforms.lifecycle import (
    DEFAULT_MAX_HOPS,
    ORIGIN_ID,
    ROW,
    conform,
    conform_events,
    copy_states,
    coupled,
    event_key,
    is_lineage_name,
    is_lineage_topic,
    is_own_copy,
    link,
    offset_consumption,
    state_events,
    stored_copies,
    topic_arrivals,
)

CHECKPOINT = "semantics"
PENDING = "semantics-pending"
#: Rows of the pending table: a live copy, a topic's first arrival (``topic``, ``storeTimestamp``)
#: or the watermark the table is at (``storeTimestamp``).
COPY, TOPIC, MARK = "copy", "topic", "mark"
#: The copies that only new input can change (:func:`dormant`), appended batch by batch instead
#: of rewritten with the pending set; a ``WOKEN`` row (``rowId``, ``batch``) ends every row of
#: that copy from an earlier batch.
DORMANT = "semantics-dormant"
WOKEN = "woken"
#: File statistics of the two tables (set when a batch creates them, or by :func:`run` on tables
#: an older msglake made): the columns their reads filter on, not Delta's default of the first
#: 32 (see msglake.schemas.tables.STATS_COLUMNS).
PENDING_STATS = stats_columns("kind", "dueAt", "storeTimestamp", "rowId", "uniqueId")
DORMANT_STATS = stats_columns("kind", "batch", "rowId", "uniqueId")


@dataclass
class SemanticsSummary:
    batches: int = 0
    events: int = 0
    dead_letters: int = 0
    #: Messages stored at or before a watermark already passed when they arrived.
    late: int = 0
    #: Copies pending after the last batch (live at the watermark, or stored after it)...
    pending: int = 0
    #: ... of them dormant: waiting for a consumer, no batch reads them until one names them.
    dormant: int = 0
    seconds: float = 0.0
    #: The watermark the run reached: every state change at or before it is logged.
    watermark: dt.datetime | None = None
    tables: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        wm = self.watermark.isoformat() if self.watermark else "none yet (no data)"
        out = [f"semantics: {self.batches} batch(es) in {self.seconds:.1f}s; watermark {wm}",
               f"  logged {self.events:,} state changes, {self.dead_letters:,} dead-lettered copies; "
               f"{self.pending:,} copies pending ({self.dormant:,} of them waiting for a consumer)"]
        if self.late:
            out.append(f"  {self.late:,} messages arrived after the watermark had passed their store time "
                       "(evaluated on arrival; raise --lateness to wait for them)")
        return out


@dataclass
class Held:
    """The pending set as this run's last batch wrote it, kept by the stream: while the table is at
    the version that write made, the next batch takes it from here instead of reading the table
    (a Delta snapshot of the new version and a job for the marks, about 0.5 s of a 4-5 s batch)."""

    #: The pending table's version the write made.
    version: int
    #: The watermark (epoch microseconds) and each topic's first arrival: the marks.
    watermark: int
    topics: dict[str, int]
    #: The live copies (``ROW`` and ``dueAt``): a projection of the batch's checkpoint (``keep``),
    #: whose plan reads no table.
    copies: DataFrame
    #: How many there are, and how many of them are in a RocketMQ chain (:func:`in_chain`).
    live: int
    chained: int


@dataclass
class Stream:
    """What every micro-batch of one run needs."""

    spark: SparkSession
    settings: Settings
    lateness: dt.timedelta
    max_hops: int
    tables: dict[str, str]
    summary: SemanticsSummary
    #: Marks the run's commits (the checkpoint's query id is part of it), with ``checkpoint``.
    app_id: str = "msglake-semantics"
    checkpoint: str | None = None
    writers: dict[str, OnceWriter] = field(default_factory=dict, repr=False)
    #: The pending set the last batch of this run wrote (None: read the table).
    held: Held | None = field(default=None, repr=False)
    #: Batches that took the pending set from ``held`` (the others read the table).
    held_batches: int = 0

    @property
    def pending_path(self) -> str:
        return self.settings.lake.checkpoint_path(PENDING)

    @property
    def dormant_path(self) -> str:
        return self.settings.lake.checkpoint_path(DORMANT)

    def writer(self, suffix: str = "") -> OnceWriter:
        """Writes a batch's tables once each: ``"-pending"`` the pending set, ``"-dormant"`` the
        dormant copies, ``""`` the logs."""
        if suffix not in self.writers:
            self.writers[suffix] = OnceWriter(self.app_id + suffix, self.checkpoint)
        return self.writers[suffix]

    def write_counted(self, suffix: str, rows: DataFrame, path: str, batch_id: int, counted: Column | None = None,
                      mode: str = "append", **options: str) -> int:
        """Write ``rows`` as :meth:`writer` ``suffix``'s batch ``batch_id``, and return how many of them
        ``counted`` holds (all: None), counted as they were written: a count of its own was one
        more Spark job over the batch's plan. A batch written before a crash is counted apart."""
        counted = F.lit(True) if counted is None else counted
        return self.write_observed(suffix, rows, path, batch_id, {"n": counted}, mode, **options)[0]["n"]

    def write_observed(self, suffix: str, rows: DataFrame, path: str, batch_id: int, counts: dict[str, Column],
                       mode: str = "append", **options: str) -> tuple[dict[str, int], bool]:
        """:meth:`write_counted` with several counts (name -> the condition counted); and whether
        this call made the commit (False: the batch was written before a crash)."""
        from pyspark.sql import Observation

        metrics = [F.count_if(c).alias(name) for name, c in counts.items()]
        seen = Observation(f"msglake-semantics{suffix}-{batch_id}")
        if self.writer(suffix).write(rows.observe(seen, *metrics), path, batch_id, mode, **options):
            return {name: seen.get[name] for name in counts}, True
        return rows.agg(*metrics).first().asDict(), False

    def table(self, name: str) -> DataFrame | None:
        path = self.settings.lake.table_path(name)
        if os.path.isdir(os.path.join(path, "_delta_log")):
            return self.spark.read.format("delta").load(path)
        return None


def _ts(micros: int | None):
    return None if micros is None else dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        microseconds=micros)


#: Up to this many retry-record origins are looked up by id (file statistics skip the rest of
#: the table); more, and the table is joined whole.
ORIGIN_LOOKUP_IDS = 10_000


def _origins(s: Stream, batch: DataFrame, topics) -> DataFrame | None:
    """Where the origins of the batch's RocketMQ retry records may be: an earlier batch too, so
    the table (only the rows with those ids, where few), or None when no record names one.
    ``topics``: the batch's topics (no Spark job when none is a retry or DLQ topic)."""
    if "properties" not in batch.columns or not any(map(is_lineage_name, topics)):
        return None
    origin = F.col("properties")[ORIGIN_ID]
    ids = [r[0] for r in batch.where(is_lineage_topic(F.col("topic")) & origin.isNotNull()).select(origin)
           .distinct().limit(ORIGIN_LOOKUP_IDS + 1).collect()]
    table = s.table(MESSAGES_TABLE.name)
    if not ids or table is None:
        return None
    return table if len(ids) > ORIGIN_LOOKUP_IDS else table.where(F.col("messageId").isin(ids))


def in_chain() -> Column:
    """Whether a pending copy is in a RocketMQ chain: a ``%RETRY%``/``%DLQ%`` record, or one a later
    record of its message follows."""
    return is_lineage_topic(F.col("topic")) | F.col("nextRowId").isNotNull()


def dormant(policies) -> Column:
    """Whether a pending copy can change only through new input: nothing makes it due (no
    release, expiry or other fate known: ``dueAt`` null), its topic does not couple its copies
    (an arrival there could overflow it), and no RocketMQ chain holds it. A consumer event that
    names it, an offset snapshot past it or a retry record of its message wakes it
    (:func:`_wake`); until then no batch reads or rewrites it."""
    return F.col("dueAt").isNull() & ~coupled(policies) & ~in_chain()


def dormant_copies(spark: SparkSession, path: str, before: int | None = None) -> DataFrame | None:
    """The dormant copies (``ROW`` and ``dueAt``) as of the batches before ``before`` (all: None):
    each copy's row of its latest batch, unless a later ``WOKEN`` row ended it."""
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    rows = spark.read.format("delta").load(path)
    if before is not None:
        rows = rows.where(F.col("batch") < before)
    ended = rows.where(F.col("kind") == WOKEN).groupBy("rowId").agg(F.max("batch").alias("_ended"))
    return (rows.where(F.col("kind") == COPY).join(ended, "rowId", "left")
            .where(F.col("_ended").isNull() | (F.col("batch") >= F.col("_ended"))).select(*ROW, "dueAt"))


def _wake(s: Stream, batch_id: int, touched: list[tuple[DataFrame, list[str], str]]) -> DataFrame | None:
    """The dormant copies that ``touched`` (key sets, each with its flag column) names, kept for
    the batch; None when there are none. With no key sets the dormant table is not read; when
    the sets are empty, one small job finds that."""
    rows = None if not touched else dormant_copies(s.spark, s.dormant_path, batch_id)
    if rows is None:
        return None
    keys = reduce(lambda a, b: a.unionByName(b), [df.select(F.lit(1).alias("k")) for df, _, _ in touched])
    if not keys.limit(1).collect():
        return None
    flags = []
    for df, on, flag in touched:
        rows = rows.join(F.broadcast(df), on, "left")
        flags.append(F.col(flag).isNotNull())
    # A checkpoint, not a cache: its plan must not read the dormant table (see step)
    return rows.where(reduce(operator.or_, flags)).select(*ROW, "dueAt").localCheckpoint(eager=False)


def _no_stale_dormant(s: Stream) -> None:
    """Fails when there is no pending set but dormant copies of a batch after the first: until
    its first batch wrote the pending set, a run wrote no later batch, so they are an earlier
    checkpoint's (its pending set deleted without them), and batch ids that start over would
    read them as this run's. Rows of batch 0 are a first batch's try, run again after a crash."""
    if (os.path.isdir(os.path.join(s.pending_path, "_delta_log"))
            or not os.path.isdir(os.path.join(s.dormant_path, "_delta_log"))):
        return
    if s.spark.read.format("delta").load(s.dormant_path).where(F.col("batch") > 0).limit(1).collect():
        raise LakeError(f"{s.dormant_path} holds copies of an earlier semantics run, whose pending set "
                        f"({s.pending_path}) is gone: delete {s.settings.lake.checkpoint_path(CHECKPOINT)}, "
                        f"semantics-pending and semantics-dormant together to start over")


def _no_constraints(spark: SparkSession):
    """Within, the plans Spark optimizes infer no constraints (the conditions a plan's rows are
    known to meet). A checkpoint keeps those of the plan it was made from, and a plan over it
    adds its own: the pending set held from batch to batch (:class:`Held`) carried every
    batch's watermark conditions into the next, and planning them grew until the driver ran out
    of memory (batches of 4 s took 14-26 s by the tenth, then "GC overhead limit exceeded").
    A plan another thread optimizes meanwhile infers none either (the same results)."""
    return setting(spark, "spark.sql.constraintPropagation.enabled", "false")


def step(s: Stream, batch: DataFrame, batch_id: int) -> None:
    """One micro-batch: see the module docstring."""
    with ExitStack() as sizing:
        _step(s, batch, batch_id, sizing)


def _step(s: Stream, batch: DataFrame, batch_id: int, sizing: ExitStack) -> None:
    """:func:`step`; its jobs are sized (``session.sized_for``) in ``sizing`` once the batch's new
    messages are counted."""
    spark, policies = s.spark, policy_dicts(s.settings.policies)
    held = s.held
    if held is not None and log_version(s.pending_path) != held.version:
        held = None  # the table moved on without this run: read it
    copies, live, chained = None, 0, None
    if held is not None:
        s.held_batches += 1
        w_prev, topics, copies, live, chained = held.watermark, dict(held.topics), held.copies, held.live, held.chained
    else:
        w_prev, topics = None, {}
        if os.path.isdir(os.path.join(s.pending_path, "_delta_log")):
            from pyspark.sql import Observation

            # The marks, and how many copies are pending (observed by the same job)
            pending = spark.read.format("delta").load(s.pending_path)
            copies_seen = Observation(f"msglake-semantics-pending-{batch_id}")
            marks = (pending.observe(copies_seen, F.count_if(F.col("kind") == COPY).alias("n"))
                     .where(F.col("kind") != COPY)
                     .select("kind", "topic", F.unix_micros("storeTimestamp").alias("us")).collect())
            live = copies_seen.get["n"]
            w_prev = next((m["us"] for m in marks if m["kind"] == MARK), None)
            topics = {m["topic"]: m["us"] for m in marks if m["kind"] == TOPIC}
            copies = pending.where(F.col("kind") == COPY).select(*ROW, "dueAt")
    # The batch's arrivals per topic and its late messages (own copies stored by the last
    # watermark: what stored_copies keeps), in one job.
    store = F.col("storeTimestamp")
    late = F.lit(0) if w_prev is None else F.count_if(is_own_copy() & (store <= F.lit(_ts(w_prev))))
    seen = conform(batch).groupBy("topic").agg(F.unix_micros(F.min(store)).alias("since"),
                                                F.unix_micros(F.max(store)).alias("newest"),
                                                late.alias("late"), F.count(F.lit(1)).alias("n")).collect()
    # A small batch (its new messages and the copies pending, dormant ones aside) runs as a small
    # job, in both sessions its frames come from: the stream's (the batch) and the run's.
    small = sum(r["n"] for r in seen) + live <= SMALL_JOB_ROWS
    for session in (spark, batch.sparkSession):  # the second is left alone when it is the first
        sizing.enter_context(sized_for(session, small))
    arrivals = {r["topic"]: (r["since"], r["newest"]) for r in seen}
    for topic, (since, _) in arrivals.items():
        topics[topic] = min(since, topics.get(topic, since))
    newest = max((n for _, n in arrivals.values()), default=None)
    lateness_us = s.lateness // dt.timedelta(microseconds=1)
    w = max([x for x in (w_prev, None if newest is None else newest - lateness_us) if x is not None], default=None)
    if w is None or w == w_prev and not arrivals:
        return
    t, t_prev = _ts(w), _ts(w_prev)
    s.summary.late += sum(r["late"] for r in seen)

    # The frames this batch reads more than once are kept as checkpoints, not caches: a cached
    # frame keeps its whole plan, which Spark analyses again (and matches with its cache) for
    # every frame built on it, and plans again in every job that reads it; a checkpoint's plan is
    # one leaf. (bench_semantics_batch.py's third round: 68 -> 53 Spark jobs, 9.6 -> 7.8 s.)
    new = stored_copies(batch, policies, origins=_origins(s, batch, arrivals)).select(
        *[c for c in ROW if c not in ("nextRowId", "nextTopic", "nextStore", "offsetConsumedAt")])
    new = new.select("*", *[F.lit(None).cast(k).alias(c) for c, k in (
        ("offsetConsumedAt", "timestamp"), ("nextRowId", "string"), ("nextTopic", "string"),
        ("nextStore", "timestamp"))]).select(*ROW).localCheckpoint(eager=False)
    events = s.table(CONSUMER_EVENTS_TABLE.name)
    events = None if events is None else conform_events(events).withColumn("_id", event_key())
    offsets = s.table("consumer_offsets")

    fresh = new.where(store <= t)
    woken = None
    # A RocketMQ chain's records are evaluated together: all of it once one of its records is.
    chain = in_chain()
    if copies is None:
        due, waiting = fresh, None
    else:
        after = (lambda c: c > t_prev) if t_prev is not None else (lambda c: c.isNotNull())
        reasons = [F.col("dueAt") <= t, coupled(policies)]
        touched = []
        if events is not None:
            named = broadcast_distinct(events.where(after(F.col("time")) & (F.col("time") <= t)).select(
                "topic", F.col("_id").alias("uniqueId"))).withColumn("_named", F.lit(True))
            touched.append((named, ["topic", "uniqueId"], "_named"))
        if offsets is not None:
            passed = broadcast_distinct(offsets.where(after(F.col("snapshotTime")) & (F.col("snapshotTime") <= t))
                                        .select("topic", F.col("queue").cast("int").alias("partition"))
                                        ).withColumn("_passed", F.lit(True))
            touched.append((passed, ["topic", "partition"], "_passed"))
        # The dormant copies this batch's input names join the pending ones (the rest cannot change).
        # A new row is in a chain only in a retry or DLQ topic (its nextRowId is null); with none
        # of those and no chained copy pending (known when the set is held), no chain wakes one.
        if chained or chained is None or any(map(is_lineage_name, arrivals)):
            chains = broadcast_distinct(copies.where(chain).select("uniqueId").unionByName(
                fresh.where(chain).select("uniqueId"))).withColumn("_chained", F.lit(True))
            waking = touched + [(chains, ["uniqueId"], "_chained")]
        else:
            waking = touched
        woken = _wake(s, batch_id, waking)
        if woken is not None:
            copies = copies.unionByName(woken)
        flagged = copies
        for df, keys, flag in touched:
            flagged = flagged.join(F.broadcast(df), keys, "left")
            reasons.append(F.coalesce(F.col(flag), F.lit(False)))
        due_now = (store <= t) & F.coalesce(reduce(operator.or_, reasons), F.lit(False))
        flagged = flagged.withColumn("_due", due_now).localCheckpoint(eager=False)
        chained = broadcast_distinct(
            flagged.where(chain).select("uniqueId").unionByName(fresh.where(chain).select("uniqueId"))
            .join(flagged.where("_due").select("uniqueId").unionByName(fresh.select("uniqueId")), "uniqueId",
                  "left_semi")).withColumn("_chain", F.lit(True))
        # Kept: due and waiting both read it, and each read would run the chain join again.
        flagged = flagged.join(F.broadcast(chained), "uniqueId", "left").withColumn(
            "_due", F.col("_due") | (F.col("_chain").isNotNull() & (store <= t))).localCheckpoint(eager=False)
        due = flagged.where("_due").select(*ROW).unionByName(fresh)
        waiting = flagged.where(~F.col("_due")).select(*ROW, "dueAt")
    # The copies whose state changes up to the last watermark are logged already (not those
    # stored after it, which waited unevaluated).
    was_pending = None if copies is None else copies.where(store <= t_prev).select("rowId", "hop")

    base = due.where("stored").drop("offsetConsumedAt")
    base = offset_consumption(link(base), offsets, t).select(*ROW).unionByName(due.where(~F.col("stored")))
    # the events of these messages in any topic: their dead-letter copies are made on the way
    ids = base.select(F.col("uniqueId").alias("_id")).distinct()
    mine = None if events is None else events.join(ids, "_id", "left_semi").drop("_id")
    arrived = spark.createDataFrame([(k, _ts(v)) for k, v in sorted(topics.items())], "topic string, since timestamp")
    result = evaluate_copies(base, policies, t, arrived, mine, s.max_hops)

    logged = state_events(result.fated, t).withColumn("asOf", F.lit(None).cast("timestamp"))
    if was_pending is not None:
        # what a pending copy did by the last watermark is logged already
        logged = logged.where(F.col("time") > t_prev).unionByName(
            logged.where(F.col("time") <= t_prev).join(was_pending.select("rowId"), "rowId", "left_anti"))
    dead = copy_states(result.fated.where(F.col("hop") >= 1), t)
    if was_pending is not None:
        dead = dead.join(was_pending, ["rowId", "hop"], "left_anti")
    # A dead-letter copy as it was made: ready in its topic from its store time.
    dead = dead.withColumns({"asOf": F.lit(None).cast("timestamp"), "state": F.lit("ready"),
                             "stateReason": F.lit(None).cast("string"), "stateTime": store,
                             "consumedAt": F.lit(None).cast("timestamp"),
                             "deadLetterTopic": F.lit(None).cast("string")})
    # A write task per core: the rows are a union of many small parts (one task each, 40 for 9K
    # events), and each task writes a file per topic it holds.
    tasks = spark.sparkContext.defaultParallelism
    s.held = None  # until the pending set is written again
    n_events, n_dead = (s.write_counted("", rows.select(*spec.schema.names).coalesce(tasks), s.tables[spec.name],
                                        batch_id)
                        for spec, rows in ((MESSAGE_EVENTS_TABLE, logged), (DEAD_LETTERS_TABLE, dead)))

    live = result.fated.where(F.col("state").isin("scheduled", "ready")).select(*ROW, "dueAt")
    later = new.where(store > t).withColumn("dueAt", store)
    keep = live.unionByName(later)
    if waiting is not None:
        keep = keep.unionByName(waiting)
    # After a write to a table, Spark plans again every cached frame that reads it, and drops
    # its cache (SaveIntoDataSourceCommand's recache): ten Delta file listings (~2 s) after the
    # pending set's overwrite, and a later use would read the new version (the events counted
    # after it came out 2,000 too high). So what the two writes below read is a checkpoint,
    # whose plan reads no table, as is every frame the batch keeps (none is cached).
    with _no_constraints(spark), _no_constraints(keep.sparkSession):  # the batch's frames are in its own session
        keep = keep.withColumns({"kind": F.lit(COPY), "_dormant": dormant(policies)}).localCheckpoint(eager=False)
    # First the dormant copies (with an end for the woken ones' earlier rows), then the pending
    # set: a batch run again after a crash between the two reads only the dormant rows of
    # earlier batches, so it sees what the first run saw.
    asleep = keep.where("_dormant").drop("_dormant").withColumn("batch", F.lit(batch_id).cast("bigint"))
    if woken is not None:
        asleep = asleep.unionByName(woken.select("rowId", F.lit(WOKEN).alias("kind"),
                                                 F.lit(batch_id).cast("bigint").alias("batch")),
                                    allowMissingColumns=True)
    s.writer("-dormant").write(asleep.coalesce(tasks), s.dormant_path, batch_id, **DORMANT_STATS)
    meta = spark.createDataFrame([(TOPIC, k, _ts(v)) for k, v in sorted(topics.items())] + [(MARK, None, t)],
                                 "kind string, topic string, storeTimestamp timestamp")
    # Each file sorted by due time (its statistics bound it), without a global sort: a batch reads
    # the whole set, and a range sort is a sampling job and a shuffle of its own (the 8th-14th of
    # 14 batches of 2,000 messages, stepped alone: 23.95 / 23.98 s -> 22.65 / 23.15 s in all).
    state = (keep.where(~F.col("_dormant")).drop("_dormant").unionByName(meta, allowMissingColumns=True)
             .coalesce(tasks).sortWithinPartitions(F.col("dueAt").asc_nulls_last()))
    # the dormant copies are counted at the run's end
    is_copy = F.col("kind") == COPY
    counts, made = s.write_observed("-pending", state, s.pending_path, batch_id,
                                    {"n": is_copy, "chained": is_copy & in_chain()}, "overwrite",
                                    overwriteSchema="true", **PENDING_STATS)
    kept = counts["n"]
    version = log_version(s.pending_path)
    if made and commit_metadata(s.pending_path, version) == commit_mark(s.writer("-pending").app_id, batch_id):
        # In a few partitions: the set is a union of the last set's and the batch's parts, whose
        # partitions would add up batch after batch (a task each).
        s.held = Held(version, w, topics, keep.where(~F.col("_dormant")).select(*ROW, "dueAt").coalesce(tasks),
                      kept, counts["chained"])

    s.summary.batches += 1
    s.summary.events += n_events
    s.summary.dead_letters += n_dead
    s.summary.pending = kept
    s.summary.watermark = t


def run(spark, settings: Settings, *, available_now: bool = True, interval: str = "5 seconds",
        lateness_seconds: int = 60, max_hops: int = DEFAULT_MAX_HOPS, stop: threading.Event | None = None,
        stop_timeout: float = 60.0) -> SemanticsSummary:
    """Run the semantics stream until it has caught up (available-now) or ``stop`` is set."""
    messages = settings.lake.table_path(MESSAGES_TABLE.name)
    ensure_table(spark, settings, MESSAGES_TABLE)
    tables = {spec.name: ensure_table(spark, settings, spec) for spec in (MESSAGE_EVENTS_TABLE, DEAD_LETTERS_TABLE)}
    checkpoint = settings.lake.checkpoint_path(CHECKPOINT)
    summary = SemanticsSummary(tables=tables)
    stream = Stream(spark, settings, dt.timedelta(seconds=lateness_seconds), max_hops, tables, summary)
    _no_stale_dormant(stream)
    for path, properties in ((stream.pending_path, PENDING_STATS), (stream.dormant_path, DORMANT_STATS)):
        if os.path.isdir(os.path.join(path, "_delta_log")):  # made by an older msglake, perhaps
            add_missing_properties(spark, path, properties)
    started = time.monotonic()

    def batch(df: DataFrame, batch_id: int) -> None:
        if stream.checkpoint is None:  # the query id is in the checkpoint once the query has started
            stream.app_id, stream.checkpoint = f"msglake-semantics:{cp.query_id(checkpoint)}", checkpoint
        step(stream, df, batch_id)

    writer = (
        spark.readStream.format("delta").load(messages)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", checkpoint)
        .queryName("msglake-semantics")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=interval)
    query = writer.start()
    wait_or_stop(query, stop, stop_timeout)
    asleep = dormant_copies(spark, stream.dormant_path)
    summary.dormant = 0 if asleep is None else asleep.count()
    summary.pending += summary.dormant
    summary.seconds = time.monotonic() - started
    return summary
