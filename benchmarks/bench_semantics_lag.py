"""Event lag of the semantics stream while a writer appends: issue 17's streaming figure.

    .venv/bin/python benchmarks/bench_semantics_lag.py [--rate 2000] [--seconds 40] [--ttl-ms 3000] [--warmup 60]

One Spark session (local[2]) runs both streams of a live lake, as a deployment does: the
ingest stream (1 s trigger) from an nsqd data path into ``messages``, and ``msglake semantics``
(1 s trigger, ``--lateness 0``) from ``messages`` into ``message_events``/``dead_letters``.
A writer appends ``--rate`` messages/s for ``--warmup`` + ``--seconds`` seconds to two topics of two
partitions each, flushing every 100 ms as nsqd does: ``orders`` expire after ``--ttl-ms`` into
``orders.dlq`` (so a part of the state changes fall due after their message was stored and are
logged only once the watermark passes them), ``audit`` has no policy; ``orders.dlq`` gets one
message before the run, so that dead-letter copies have a topic to go to.

Per logged state change, lag = commit time of the ``message_events`` version that holds it -
the change's own time (``time``: a store, a release, an expiry). A change can be logged only
once the watermark (newest ``storeTimestamp`` ingested - lateness) has passed it, so the lag
holds the ingest stream's freshness plus the semantics stream's batch. Counted: the changes
whose time is in the steady part of the run (after the warm-up, and at least 2 s before the
writer stops, so the watermark passes them while the writer still writes). The warm-up
matters: a fresh JVM's first micro-batches compile their code paths and take several times a
warm batch (2026-11-26: the first semantics batch ~35 s), so without one the figure is the
start-up of both streams, not their steady state. Reports
p50/p95/max, the batches of both streams and the median time between semantics commits.
Starts from an empty lake (no pending backlog). Writes benchmarks/results/semantics-lag-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from pathlib import Path

from bench_stream import append_at_rate, log_commits, quantile  # benchmarks/ is on sys.path when a script in it runs
from bench_stream import settings_for as stream_settings
from results_file import write

REPO = Path(__file__).resolve().parent.parent
TOPICS = ("orders", "audit")
#: Seconds of the run's end left out of the figure (changes due after the last message, which
#: no watermark passes).
TAIL_S = 2.0
#: How long the streams may take, after the writer stops, to log the changes counted.
CATCH_UP_S = 300.0


def settings_for(root: Path, ttl_ms: int):
    """bench_stream's settings (lake and nsqd data path under ``root``) with the orders policy."""
    from msglake.pipelines import settings as S

    doc = stream_settings(root / "lake", root / "nsq").model_dump()
    doc["policies"] = {"orders": {"messageTtlMs": ttl_ms, "deadLetterTopic": "orders.dlq"}}
    return S.from_dict(doc, "benchmark settings")


def file_commit_times(table: Path) -> dict[str, float]:
    """Data file name -> commit time (s) of the Delta version that added it."""
    return {name: ts for _, ts, added in log_commits(str(table)) for name in added}


def wait_for_data(table: Path, timeout: float = 300.0) -> None:
    """Until a commit of ``table`` has added a data file."""
    deadline = time.time() + timeout
    while not ((table / "_delta_log").exists() and file_commit_times(table)):
        if time.time() > deadline:
            raise TimeoutError(f"no data in {table} after {timeout:.0f}s")
        time.sleep(0.2)


def write_messages(root: Path, rate: int, seconds: int) -> tuple[float, float, int]:
    """Append ``rate`` messages/s for ``seconds`` s over TOPICS x 2 partitions: (start, end, count)."""
    from msglake.samples.nsq_writer import NsqQueueWriter

    writers = [NsqQueueWriter(str(root / "nsq"), t, p, first_message_id=10) for t in TOPICS for p in (0, 1)]
    total = rate * seconds
    started = time.time()
    append_at_rate(writers, rate, total, b"lag", 200)
    return started, time.time(), total


def measure(spark, root: Path, settings, rate: int, seconds: int, warmup: int = 60) -> dict:
    from msglake.pipelines.jobs import ingest, semantics

    stop_ingest, stop_semantics = threading.Event(), threading.Event()
    runs: dict = {}

    def ingest_job():
        runs["ingest"] = ingest.run(spark, settings, available_now=False, interval="1 second", stop=stop_ingest)

    def semantics_job():
        runs["semantics"] = semantics.run(spark, settings, available_now=False, interval="1 second",
                                          lateness_seconds=0, stop=stop_semantics)

    from msglake.samples.nsq_writer import NsqQueueWriter

    for t in (*TOPICS, "orders.dlq"):  # one message per topic first: both streams start on data, not on an empty table
        with NsqQueueWriter(str(root / "nsq"), t, 0) as w:
            w.put(b"warm-up")
    # The ingest stream makes the messages table before the semantics stream reads it.
    jobs = [threading.Thread(target=ingest_job), threading.Thread(target=semantics_job)]
    jobs[0].start()
    wait_for_data(Path(settings.lake.table_path("messages")))
    jobs[1].start()
    events = Path(settings.lake.table_path("message_events"))
    wait_for_data(events)
    started, ended, total = write_messages(root, rate, warmup + seconds)
    # Every change in the counted window is logged once the watermark passes its end.
    window = (started + warmup, ended - TAIL_S)
    deadline, caught_up = time.time() + CATCH_UP_S, False
    while not caught_up and time.time() < deadline and all(j.is_alive() for j in jobs):
        time.sleep(1.0)
        got = spark.read.format("delta").load(str(events)).selectExpr("max(unix_micros(time)) / 1e6 AS t").first()
        caught_up = got["t"] is not None and got["t"] >= window[1]
    stop_ingest.set()
    stop_semantics.set()
    for j in jobs:
        j.join()
    if not caught_up or set(runs) != {"ingest", "semantics"}:
        raise RuntimeError(f"the streams did not log the run's changes within {CATCH_UP_S:.0f} s of the writer's "
                           f"end (streams finished: {sorted(runs)}); see the lake's _logs/spark.log")
    commits = file_commit_times(events)
    rows = (spark.read.format("delta").load(str(events))
            .selectExpr("event", "unix_micros(time) / 1e6 AS t", "_metadata.file_name AS f")
            .where(f"t >= {window[0]} AND t <= {window[1]}").collect())
    lags = sorted(commits[r.f] - r.t for r in rows)
    by_event: dict[str, int] = {}
    for r in rows:
        by_event[r.event] = by_event.get(r.event, 0) + 1
    during = sorted(set(commits.values()))
    gaps = sorted(b - a for a, b in zip(during, during[1:]))
    return {"rate_per_s": rate, "seconds": seconds, "warmup_s": warmup, "messages": total, "trigger": "1 second",
            "lateness_s": 0,
            "counted_changes": len(lags), "by_event": by_event, "lag_p50_s": quantile(lags, 0.50), "lag_p95_s": quantile(lags, 0.95),
            "lag_max_s": lags[-1], "ingest_batches": runs["ingest"].batches,
            "semantics_batches": runs["semantics"].batches, "pending_after": runs["semantics"].pending,
            "semantics_commit_interval_median_s": gaps[len(gaps) // 2] if gaps else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=int, default=2000, help="appends per second (default 2,000)")
    p.add_argument("--seconds", type=int, default=40, help="length of the writer's run (default 40)")
    p.add_argument("--ttl-ms", type=int, default=3000, help="TTL of the orders topic (default 3,000 ms)")
    p.add_argument("--warmup", type=int, default=60,
                   help="seconds the writer appends before the measured --seconds (default 60)")
    args = p.parse_args()
    if args.warmup < 0 or min(args.rate, args.seconds) < 1 or args.seconds <= TAIL_S:
        p.error(f"--warmup must be >= 0, --rate >= 1 and --seconds > {TAIL_S:.0f}")

    from msglake.pipelines.session import build_session

    root = REPO / "bench-data" / "semantics-lag"
    shutil.rmtree(root, ignore_errors=True)
    (root / "nsq").mkdir(parents=True)
    settings = settings_for(root, args.ttl_ms)
    spark = build_session(settings, app_name="msglake-bench-semantics-lag")
    r = measure(spark, root, settings, args.rate, args.seconds, args.warmup)
    print(f"semantics lag at {r['rate_per_s']:,} msg/s ({r['seconds']} s after a {r['warmup_s']} s warm-up, 1 s "
          "triggers, lateness 0): "
          f"p50 {r['lag_p50_s']:.2f}s, p95 {r['lag_p95_s']:.2f}s, max {r['lag_max_s']:.2f}s over "
          f"{r['counted_changes']:,} state changes {r['by_event']}; {r['ingest_batches']} ingest and "
          f"{r['semantics_batches']} semantics batches, median {r['semantics_commit_interval_median_s']:.2f}s "
          f"between semantics commits; {r['pending_after']:,} copies pending after the run", flush=True)
    write("semantics-lag", r)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
