"""What one small micro-batch of ``msglake semantics`` costs, and in how many Spark jobs.

    .venv/bin/python benchmarks/bench_semantics_batch.py [--messages 2000] [--rounds 3]

One session (local[2]) and bench_semantics_lag.py's lake and policies (``orders`` expire after
3 s into ``orders.dlq``, ``audit`` has none). Each round appends ``--messages`` NSQ messages
over the two topics x 2 partitions, ingests them (``ingest --available-now``) and runs
``semantics --available-now`` once: one batch over the new messages and the copies pending
from the rounds before. Prints each round's seconds and the Spark jobs its semantics run
started (read from the session's own UI, which this benchmark turns on); the first rounds pay
the JVM's warm-up, the last one is the figure. Writes benchmarks/results/semantics-batch-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
import urllib.request
from pathlib import Path

from bench_semantics_lag import TOPICS, settings_for  # benchmarks/ is on sys.path when a script in it runs
from jvm_work import JvmWork, line
from results_file import write

REPO = Path(__file__).resolve().parent.parent


def job_count(spark, since_ms: float) -> int:
    """Spark jobs of this session submitted at or after ``since_ms`` (epoch ms)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url) as r:
        jobs = json.load(r)

    def ms(s: str) -> float:
        return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f%Z").replace(tzinfo=dt.timezone.utc).timestamp() * 1000

    return sum(1 for j in jobs if ms(j["submissionTime"]) >= since_ms)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=2000, help="messages appended per round (default 2,000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = p.parse_args()
    if min(args.messages, args.rounds) < 1:
        p.error("--messages and --rounds must be >= 1")

    from msglake.pipelines.jobs import ingest, semantics
    from msglake.pipelines.session import build_session
    from msglake.samples.nsq_writer import NsqQueueWriter

    root = REPO / "bench-data" / "semantics-batch"
    shutil.rmtree(root, ignore_errors=True)
    (root / "nsq").mkdir(parents=True)
    settings = settings_for(root, 3000)
    settings.spark.conf["spark.ui.enabled"] = "true"
    spark = build_session(settings, app_name="msglake-bench-semantics-batch")
    for t in (*TOPICS, "orders.dlq"):  # every topic has a message before the first round
        with NsqQueueWriter(str(root / "nsq"), t, 0) as w:
            w.put(b"warm-up")
    writers = [NsqQueueWriter(str(root / "nsq"), t, part, first_message_id=10) for t in TOPICS for part in (0, 1)]
    rounds, n = [], 0
    work = JvmWork(spark)
    for r in range(args.rounds):
        for _ in range(args.messages):
            writers[n % len(writers)].put(b"m-%d-" % n + b"x" * 200)
            n += 1
        for w in writers:
            w.flush()
        a, w0 = time.monotonic(), work.now()
        ingest.run(spark, settings, available_now=True)
        b, since, w1 = time.monotonic(), time.time() * 1000, work.now()
        summary = semantics.run(spark, settings, available_now=True, lateness_seconds=0)
        c, sem_jvm = time.monotonic(), work.since(w1)  # before the REST call below, which is no part of it
        rounds.append({"ingest_s": b - a, "semantics_s": c - b, "jobs": job_count(spark, since),
                       "events": summary.events, "pending": summary.pending, "dormant": summary.dormant,
                       "ingest_jvm": work.since(w0, w1),
                       "semantics_jvm": sem_jvm})
        print(f"round {r}: ingest {b - a:.2f}s, semantics {c - b:.2f}s in {rounds[-1]['jobs']} Spark jobs; "
              f"{summary.events:,} state changes logged, {summary.pending:,} copies pending "
              f"({summary.dormant:,} dormant)\n  ingest: {line(rounds[-1]['ingest_jvm'])}\n"
              f"  semantics: {line(rounds[-1]['semantics_jvm'])}", flush=True)
    for w in writers:
        w.close()
    write("semantics-batch", {"messages_per_round": args.messages, "rounds": rounds})
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
