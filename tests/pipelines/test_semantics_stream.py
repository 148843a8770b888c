"""msglake semantics: the streaming job's log equals a replay at its watermark, exactly once across runs."""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from msglake.samples.nsq import generate
from msglake.pipelines import settings as S
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.jobs.semantics import run
from tests.conftest import make_settings
from msglake.transforms.lifecycle import evaluate

pytestmark = pytest.mark.slow

POLICIES = {
    # The sample stores one message per millisecond (400 ms in all): TTLs in tens of ms.
    "orders": {"messageTtlMs": 100, "deadLetterTopic": "orders.dlq", "deadLetterRoutingKey": "late"},
    "orders.dlq": {"messageTtlMs": 40, "deadLetterTopic": "orders.parked"},
    "orders.parked": {"messageTtlMs": 30, "deadLetterTopic": "orders"},          # back to orders: a cycle
    "payments": {"messageTtlMs": 80, "deadLetterTopic": "nowhere"},             # missing target
    "audit.*": {"messageTtlMs": 30},                                            # expires, no DLT
}
EVENT_COLS = ("rowId", "hop", "topic", "event", "us", "seq", "state", "reason")
COPY_COLS = ("rowId", "parentRowId", "hop", "topic", "store", "firstDeathQueue", "routingKey", "history")


def events(df, until_us):
    return sorted(tuple(r) for r in df.select(*EVENT_COLS[:4], F.unix_micros("time").alias("us"), *EVENT_COLS[5:])
                  .where(F.col("us") <= until_us).collect())


def copies(df, until_us):
    return sorted(tuple(r) for r in df.select(
        "rowId", "parentRowId", "hop", "topic", F.unix_micros("storeTimestamp").alias("store"), "firstDeathQueue",
        "routingKey", F.to_json("deathHistory").alias("history")).where(F.col("store") <= until_us).collect())


def test_stream_log_equals_a_replay_at_its_watermark(spark, tmp_path):
    generate(str(tmp_path / "nsq"), 400, bad_inputs=False, max_bytes_per_file=32 << 10)
    doc = make_settings(tmp_path / "lake", tmp_path / "nsq").model_dump()
    doc["policies"] = POLICIES
    settings = S.from_dict(doc, "test")
    ingest(spark, settings)
    summary = run(spark, settings, available_now=True, lateness_seconds=0)
    assert summary.batches >= 1 and summary.watermark is not None
    w_us = int(summary.watermark.timestamp() * 1_000_000)
    lake = settings.lake.table_path
    log = spark.read.format("delta").load(lake("message_events"))
    dead = spark.read.format("delta").load(lake("dead_letters"))
    assert log.where("asOf IS NOT NULL").count() == 0

    messages = spark.read.format("delta").load(lake("messages"))
    policies = {k: v.model_dump() for k, v in settings.policies.items()}
    replay = evaluate(messages, policies, summary.watermark)
    got_events, want_events = events(log, w_us), events(replay.events, w_us)
    kinds = {(e[3], e[7]) for e in want_events}
    # The data exercises delays, expiry without a DLT, dead-lettering, chains, cycles and missing targets.
    assert {("scheduled", None), ("expired", "expired"), ("dead_lettered", "expired"), ("dropped", "cycle"),
            ("dropped", "missing_target")} <= kinds
    assert len(want_events) > 1000 and got_events == want_events
    assert copies(dead, w_us) == copies(replay.dead_letters, w_us) != []
    assert all(h >= 1 for h in (r.hop for r in dead.select("hop").collect()))

    # A second run has nothing new to do: nothing logged twice.
    before = (log.count(), dead.count())
    again = run(spark, settings, available_now=True, lateness_seconds=0)
    assert again.events == 0 and (log.count(), dead.count()) == before
