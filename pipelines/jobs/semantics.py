"""``msglake semantics``: follow the ``messages`` table and log state changes as event time passes.

A Structured Streaming query over the Delta table ``messages``: the event-time watermark
(``storeTimestamp`` minus ``--lateness``) drives ``transformWithState`` timers (RocksDB state
store) that release scheduled messages at ``deliverAt`` and expire the rest at ``expireAt``
(transforms/lifecycle_stream.py). Each micro-batch appends to ``message_events`` and
``dead_letters`` (``asOf`` null: the live log) with Delta's ``txnAppId``/``txnVersion``, so a
replayed batch writes nothing twice. Checkpoint: ``<lake>/_checkpoints/semantics``.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, functions as F

from msglake.pipelines.io import checkpoint as cp
from msglake.pipelines.io.catalog import ensure_table
from msglake.pipelines.jobs.running import wait_or_stop
from msglake.pipelines.settings import Settings, policy_dicts
from msglake.schemas import MESSAGES_TABLE
from msglake.schemas.semantics import DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE
from msglake.transforms.lifecycle import DEFAULT_MAX_HOPS, HISTORY_TYPE, conform, copy_columns, is_lineage_topic
from msglake.transforms.lifecycle_stream import OUTPUT_SCHEMA, LifecycleProcessor
from msglake.transforms.semantics import expire_at

CHECKPOINT = "semantics"


@dataclass
class SemanticsSummary:
    batches: int = 0
    events: int = 0
    dead_letters: int = 0
    seconds: float = 0.0
    #: The event-time watermark the run reached: every event at or before it is logged.
    watermark: dt.datetime | None = None
    tables: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        wm = self.watermark.isoformat() if self.watermark else "none yet (no data)"
        return [f"semantics: {self.batches} batch(es) in {self.seconds:.1f}s; watermark {wm}",
                f"  logged {self.events:,} state changes, {self.dead_letters:,} dead-lettered copies"]


def stream_input(spark, settings: Settings) -> DataFrame:
    """The messages table as a stream of hop-0 copies, in the processor's input shape."""
    policies = policy_dicts(settings.policies)
    m = conform(spark.readStream.format("delta").load(settings.lake.table_path(MESSAGES_TABLE.name)))
    m = m.where(~F.coalesce(F.col("systemCopy"), F.lit(False)) & F.col("retryOf").isNull()
                & ~is_lineage_topic(F.col("topic")))
    us = F.unix_micros
    return m.select(*copy_columns(policies), expire_at(policies).alias("expireAt")).select(
        "rowId", "uniqueId", "topic", "partition", us("storeTimestamp").alias("storeUs"),
        us("deliverAt").alias("deliverUs"), us("expireAt").alias("expireUs"), "expiration", "exchange",
        "routingKey", "cc", "deliveryCount", "bodySize", "effectivePriority", "messageType", "storeTimestamp",
    )


class _Sink:
    def __init__(self, checkpoint: str, tables: dict[str, str], summary: SemanticsSummary):
        self.checkpoint, self.tables, self.summary = checkpoint, tables, summary

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        app_id = f"msglake-semantics:{cp.query_id(self.checkpoint)}"
        df = df.persist()
        ts = F.timestamp_micros
        history = F.transform(F.from_json("deathHistory", HISTORY_TYPE.replace("time:timestamp", "time:bigint")),
                              lambda e: e.withField("time", ts(e["time"])))
        null_ts = F.lit(None).cast("timestamp")
        events = df.where(F.col("kind") == "event").select(
            null_ts.alias("asOf"), "rowId", "uniqueId", "hop", "topic", "partition", "event",
            ts("timeUs").alias("time"), "seq", "state", "reason")
        copies = df.where(F.col("kind") == "copy").select(
            null_ts.alias("asOf"), "rowId", "uniqueId", "parentRowId", "hop", "topic", "partition",
            *[F.lit(None).cast(k).alias(c) for c, k in (("sourceFormat", "string"), ("segment", "string"),
                                                        ("segmentPosition", "bigint"), ("queueOffset", "bigint"))],
            ts("storeUs").alias("storeTimestamp"), ts("deliverUs").alias("deliverAt"), ts("expireUs").alias("expireAt"),
            "effectivePriority", "messageType", "bodySize", F.lit("ready").alias("state"),
            F.lit(None).cast("string").alias("stateReason"), ts("storeUs").alias("stateTime"),
            null_ts.alias("consumedAt"), F.lit(None).cast("string").alias("deadLetterTopic"), "exchange",
            "routingKey", "cc", history.alias("deathHistory"), "firstDeathQueue", "firstDeathReason",
            "firstDeathExchange")
        for spec, rows in ((MESSAGE_EVENTS_TABLE, events), (DEAD_LETTERS_TABLE, copies)):
            (rows.select(*spec.schema.names).write.format("delta").mode("append").option("txnAppId", app_id)
             .option("txnVersion", batch_id).save(self.tables[spec.name]))
        counts = df.groupBy("kind").count().collect()
        df.unpersist()
        by = {r["kind"]: r["count"] for r in counts}
        self.summary.batches += 1
        self.summary.events += by.get("event", 0)
        self.summary.dead_letters += by.get("copy", 0)


def run(spark, settings: Settings, *, available_now: bool = True, interval: str = "5 seconds",
        lateness_seconds: int = 60, max_hops: int = DEFAULT_MAX_HOPS, stop: threading.Event | None = None,
        stop_timeout: float = 60.0) -> SemanticsSummary:
    """Run the semantics stream until it has caught up (available-now) or ``stop`` is set."""
    messages = settings.lake.table_path(MESSAGES_TABLE.name)
    ensure_table(spark, settings, MESSAGES_TABLE)
    tables = {spec.name: ensure_table(spark, settings, spec) for spec in (MESSAGE_EVENTS_TABLE, DEAD_LETTERS_TABLE)}
    policies = policy_dicts(settings.policies)
    # A dead-letter topic exists when the lake holds messages of it or a policy names it exactly
    # (as in a replay); the list is taken when the stream starts.
    topics = sorted({r.topic for r in spark.read.format("delta").load(messages).select("topic").distinct().collect()}
                    | {p for p in policies if not any(c in p for c in "*?[")})
    checkpoint = settings.lake.checkpoint_path(CHECKPOINT)
    summary = SemanticsSummary(tables=tables)
    started = time.monotonic()
    writer = (
        stream_input(spark, settings)
        .withWatermark("storeTimestamp", f"{lateness_seconds} seconds")
        .groupBy("rowId")
        .transformWithState(LifecycleProcessor(policies, topics, max_hops), OUTPUT_SCHEMA, "Append", "EventTime")
        .writeStream.foreachBatch(_Sink(checkpoint, tables, summary))
        .option("checkpointLocation", checkpoint)
        .queryName("msglake-semantics")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=interval)
    query = writer.start()
    wait_or_stop(query, stop, stop_timeout)
    summary.seconds = time.monotonic() - started
    wm = [p.get("eventTime", {}).get("watermark") for p in query.recentProgress]
    wm = [w for w in wm if w]
    if wm and not wm[-1].startswith("1970-01-01"):
        summary.watermark = dt.datetime.fromisoformat(wm[-1].replace("Z", "+00:00"))
    return summary
