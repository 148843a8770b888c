"""Throughput of `msglake replay` (the semantics engine) on a lake of N messages, every rule exercised.

    .venv/bin/python benchmarks/bench_replay.py [--messages 1000000] [--master local[2]]

Builds a lake once (bench-data/replay-N/): a `messages` Delta table of N synthetic messages
over topics whose policies cover every fate (TTL expiry with and without a dead-letter
topic, per-message expiration, delays, dead-letter chains, a TTL cycle, a missing target,
overflow by count (drop-head) and by bytes (reject-publish-dlx), delivery limits from stored
delivery counts and from requeues, rejections, a rejection loop cut by the hop bound,
consumption) and a `consumer_events` table. Then times `msglake replay --as-of T --max-hops 4` as a user
runs it (read the tables, evaluate, write message_states, dead_letters, message_events) and
checks the counts: one hop-0 state per message, one copy per dead-lettered copy.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent
BASE_MS = 1_793_500_000_000  # 2026-11-01T02:26:40Z

POLICIES = {
    "orders": {"messageTtlMs": 60_000, "deadLetterTopic": "orders.dlq"},
    "orders.dlq": {"messageTtlMs": 30_000, "deadLetterTopic": "orders.parked", "deadLetterRoutingKey": "parked"},
    "orders.parked": {"messageTtlMs": 30_000, "deadLetterTopic": "orders"},      # TTL cycle: dropped
    "jobs": {"maxLength": 2_000, "deadLetterTopic": "jobs.dlq"},                  # drop-head by count
    "jobs.dlq": {},
    "uploads": {"maxLengthBytes": 2_000_000, "overflow": "reject-publish-dlx", "deadLetterTopic": "uploads.dlq"},
    "uploads.dlq": {"messageTtlMs": 120_000},                                     # expires, no DLT
    "tasks": {"maxDeliveries": 3, "deadLetterTopic": "tasks.dlq"},                # delivery limit
    "tasks.dlq": {},
    "payments": {"messageTtlMs": 90_000, "deadLetterTopic": "payments.gone"},    # missing target
    "rework": {"deadLetterTopic": "rework"},                                      # rejection loop
    "audit": {"expiryAtHeadOnly": True},                                          # per-message expiry at the head
}
TOPICS = ["orders", "jobs", "uploads", "tasks", "payments", "rework", "audit"]
#: What a built lake's ``.complete`` marker holds; a lake of another layout is built again. 2: every
#: column of the messages table (those the benchmark does not set are null, as ingest leaves the
#: derived ones); a lake of layout 1 lacked those the lake's views read (each run warned that
#: v_messages and v_trace were not registered).
LAKE_LAYOUT = "2"


def build(spark, lake: Path, n: int) -> None:
    from pyspark.sql import functions as F

    from msglake.schemas import MESSAGE_SCHEMA
    from msglake.schemas.spark import with_all_columns

    i = F.col("id")
    topic = F.element_at(F.array(*[F.lit(t) for t in TOPICS]), (i % len(TOPICS) + 1).cast("int"))
    store = F.timestamp_millis(F.lit(BASE_MS) + i)
    messages = spark.range(n, numPartitions=8).select(
        topic.alias("topic"), (i % 4).cast("int").alias("partition"), F.lit("synthetic").alias("sourceFormat"),
        F.lit("bench").alias("segment"), i.alias("segmentPosition"), F.format_string("m%010d", i).alias("messageId"),
        F.lit(None).cast("string").alias("uniqueId"), F.format_string("t%010d", i).alias("traceId"),
        F.lit(False).alias("systemCopy"),
        (i / 28).cast("bigint").alias("queueOffset"),
        store.alias("bornTimestamp"), store.alias("storeTimestamp"),
        F.when(i % 11 == 0, F.lit(30_000)).cast("bigint").alias("delayTime"),
        F.when(i % 13 == 0, F.timestamp_millis(F.lit(BASE_MS) + i + 20_000)).alias("expireTime"),
        F.when(topic == "tasks", (i % 6).cast("int")).otherwise(F.lit(0)).alias("deliveryCount"),
        F.when(i % 17 == 0, F.create_map(F.lit("expiration"), F.lit("15000"))).otherwise(
            F.create_map().cast("map<string,string>")).alias("properties"),
        (100 + i % 900).cast("int").alias("bodySize"), F.lit(5).alias("priority"),
        F.create_map().cast("map<string,string>").alias("headers"),
    )
    # Every other column of the table's schema as nulls of its type, as ingest leaves them.
    with_all_columns(messages, MESSAGE_SCHEMA).write.format("delta").mode("overwrite").save(str(lake / "messages"))
    m = spark.read.format("delta").load(str(lake / "messages"))
    ms = F.unix_millis("storeTimestamp")
    ev = lambda cond, kind, after_ms: m.where(cond).select(  # noqa: E731
        "topic", "messageId", F.lit("g").alias("group"), F.lit(kind).alias("event"),
        F.timestamp_millis(ms + after_ms).alias("time"))
    seq = F.col("segmentPosition")
    events = (
        ev((F.col("topic") == "orders") & (seq % 3 == 0), "acked", 10_000)
        .unionByName(ev((F.col("topic") == "tasks") & (seq % 2 == 0), "requeued", 1_000))
        .unionByName(ev((F.col("topic") == "tasks") & (seq % 2 == 0), "requeued", 2_000))
        .unionByName(ev(F.col("topic") == "payments", "rejected", 5_000))
        .unionByName(ev(F.col("topic") == "audit", "acked", 40_000))
    )
    loop = m.where((F.col("topic") == "rework") & (seq % 50 == 0)).select("topic", "messageId", "storeTimestamp")
    for k in range(1, 6):  # consumers reject the same message again and again
        events = events.unionByName(loop.select("topic", "messageId", F.lit("g").alias("group"),
                                                F.lit("rejected").alias("event"),
                                                F.timestamp_millis(F.unix_millis("storeTimestamp") + k * 100)
                                                .alias("time")))
    events.withColumn("sourceFile", F.lit(None).cast("string")).withColumn(
        "sourceLine", F.lit(None).cast("bigint")).withColumn("ingestedAt", F.current_timestamp()).write.format(
        "delta").mode("overwrite").save(str(lake / "consumer_events"))


def bench_lake(messages: int, master: str, app_name: str):
    """(lake folder, settings document, settings, session) of the N-message lake, built once."""
    from msglake.pipelines import settings as S
    from msglake.pipelines.session import build_session

    lake = REPO / "bench-data" / f"replay-{messages}"
    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = master
    doc["spark"]["conf"]["spark.driver.memory"] = "6g"
    doc["policies"] = POLICIES
    settings = S.from_dict(doc, "bench")
    spark = build_session(settings, app_name=app_name)
    marker = lake / ".complete"
    if not marker.exists() or marker.read_text() != LAKE_LAYOUT:
        shutil.rmtree(lake, ignore_errors=True)
        lake.mkdir(parents=True)
        started = time.monotonic()
        build(spark, lake, messages)
        marker.write_text(LAKE_LAYOUT)
        print(f"built the lake in {time.monotonic() - started:.1f}s", flush=True)
    return lake, doc, settings, spark


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages (default 1,000,000)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = p.parse_args()

    from msglake.pipelines import cli

    lake, doc, settings, spark = bench_lake(args.messages, args.master, "bench-replay")
    conf = lake / "msglake.yaml"
    conf.write_text(json.dumps(doc))
    for t in ("message_states", "dead_letters", "message_events", "_checkpoints"):
        shutil.rmtree(lake / t, ignore_errors=True)
    as_of = "2026-11-01T02:46:00Z"  # after the last store (N ms after the base) plus every TTL
    started = time.monotonic()
    code = cli.main(["replay", "--conf", str(conf), "--as-of", as_of, "--max-hops", "4"])
    seconds = time.monotonic() - started
    if code != 0:
        print(f"replay exited {code}", file=sys.stderr)
        return code
    states = spark.read.format("delta").load(str(lake / "message_states"))
    hop0 = states.where("hop = 0").count()
    by_reason = {f"{r.state}/{r.stateReason}": r["count"] for r in
                 states.groupBy("state", "stateReason").count().collect()}
    dead = states.where("state = 'dead_lettered'").count()
    copies = states.where("hop > 0").count()
    events = spark.read.format("delta").load(str(lake / "message_events")).count()
    ok = hop0 == args.messages and dead == copies
    result = {"messages": args.messages, "master": args.master, "seconds": round(seconds, 1),
              "messages_per_s": round(args.messages / seconds), "copies": hop0 + copies, "events": events,
              "by_state": by_reason, "checks_ok": ok}
    print(json.dumps(result, indent=2))
    write("replay", result)
    return 0 if ok else 1


if __name__ == "__main__":
    os.chdir(REPO)
    sys.exit(main())
