"""Streaming figures: sustained ingest of a backlog, and freshness in continuous mode.

    .venv/bin/python benchmarks/bench_stream.py [--backlog 2000000] [--rate 300] [--seconds 40]
        [--topics 1 --partitions 2] [--warmup 10]

1. Backlog: ``--backlog`` messages (bodies 100-1000 B) ingested with the available-now job,
   in micro-batches bounded by ``maxBytesPerTrigger``: messages/s and MB/s (0: skipped).
2. Freshness: the streaming job runs with a 1-second trigger while a writer appends
   ``--rate`` messages/s for ``--warmup`` + ``--seconds`` seconds, round-robin over ``--topics`` x
   ``--partitions`` queues (issue 19's spread case: 500 x 2), flushing the writer meta of the
   queues it wrote every 100 ms as nsqd does; per message, freshness = commit time of the
   Delta version that holds its row - its append time (``storeTimestamp``), for the messages
   appended after the warm-up. Reports p50/p95/max.
Writes benchmarks/results/stream-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent


def log_commits(table_path: str) -> list[tuple[int | None, float, list[str]]]:
    """Each commit of a Delta table, from its log: (the micro-batch id it wrote, from its
    ``userMetadata`` "<app id>:<batch id>", or None; commit time in seconds; names of the data
    files it added)."""
    out = []
    for f in sorted(Path(table_path, "_delta_log").glob("*.json")):
        batch, ts, added = None, None, []
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.append(action["add"]["path"].rsplit("/", 1)[-1])
            if "commitInfo" in action:
                ts = action["commitInfo"]["timestamp"] / 1000.0
                tail = (action["commitInfo"].get("userMetadata") or "").rpartition(":")[2]
                batch = int(tail) if tail.isdigit() else None
        if ts is not None:
            out.append((batch, ts, added))
    return out


def commit_times(table_path: str) -> dict[int, float]:
    """ingestBatchId -> commit time in seconds, from the Delta log."""
    return {batch: ts for batch, ts, _ in log_commits(table_path) if batch is not None}


def quantile(ordered: list[float], q: float) -> float:
    """The value at quantile ``q`` of an ascending, non-empty list (nearest rank below)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def append_at_rate(writers: list, rate: int, total: int, name: bytes, pad: int) -> None:
    """Append ``total`` messages, ``rate`` a second, round-robin over ``writers`` (NsqQueueWriter),
    flushing about every 100 ms as nsqd does; then close the writers. Message i's body is
    ``<name>-<i>-`` and ``pad`` bytes, its trace id i + 1."""
    started, dirty = time.monotonic(), set()
    for i in range(total):
        w = writers[i % len(writers)]
        w.put(b"%s-%d-" % (name, i) + b"x" * pad, header={"##trace_id": str(i + 1)})
        dirty.add(w)
        if i % max(rate // 10, 1) == 0:
            # Only the queues written since the last flush: nsqd syncs a queue that has new data,
            # and a thousand idle queues flushed every 100 ms would slow this writer down.
            for w in dirty:
                w.flush()
            dirty.clear()
        time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    for w in writers:
        w.close()


def settings_for(lake: Path, data: Path, **ingest):
    from msglake.pipelines import settings as S

    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["sources"] = [{"name": "bench", "format": "nsq-ext", "path": str(data)}]
    doc["ingest"].update(ingest)
    return S.from_dict(doc, "benchmark settings")


def backlog(spark, messages: int) -> dict:
    from msglake.samples.nsq import generate
    from msglake.pipelines.jobs.ingest import ingest

    data = REPO / "bench-data" / f"nsq-{messages}"
    if not (data / ".complete").exists():
        shutil.rmtree(data, ignore_errors=True)
        truth = generate(str(data), messages, max_bytes_per_file=100 << 20, bad_inputs=False)
        (data / ".complete").write_text(str(len(truth.messages)))
    expected = int((data / ".complete").read_text())
    lake = REPO / "bench-data" / "lake-stream"
    shutil.rmtree(lake, ignore_errors=True)
    summary = ingest(spark, settings_for(lake, data))
    assert summary.messages == expected and summary.balanced
    mb = summary.message_bytes / 1e6
    return {"messages": expected, "batches": summary.batches, "seconds": summary.seconds,
            "messages_per_s": expected / summary.seconds, "mb_per_s": mb / summary.seconds}


def queue_names(topics: int, partitions: int) -> list[tuple[str, int]]:
    """The (topic, partition) queues of a freshness run: ``fresh`` 1..partitions for one topic
    (partition 0 holds the warm-up message), else ``fresh-000``... 0..partitions-1."""
    if topics == 1:
        return [("fresh", p) for p in range(1, partitions + 1)]
    return [(f"fresh-{t:03d}", p) for t in range(topics) for p in range(partitions)]


def freshness(spark, rate: int, seconds: int, topics: int = 1, partitions: int = 2, warmup: int = 0) -> dict:
    from msglake.samples.nsq_writer import NsqQueueWriter
    from msglake.pipelines.jobs.ingest import run

    root = REPO / "bench-data" / "fresh"
    shutil.rmtree(root, ignore_errors=True)
    data, lake = root / "nsq", root / "lake"
    data.mkdir(parents=True)
    settings = settings_for(lake, data)
    stop = threading.Event()
    result = {}
    job = threading.Thread(target=lambda: result.setdefault(
        "summary", run(spark, settings, available_now=False, interval="1 second", stop=stop)))
    with NsqQueueWriter(str(data), "fresh", 0) as w:  # a first message warms the job up
        w.put(b"warm-up")
    job.start()
    table = Path(settings.lake.table_path("messages"))
    while not (table / "_delta_log").exists() or not commit_times(str(table)):
        time.sleep(0.2)
    writers = [NsqQueueWriter(str(data), t, p, first_message_id=10) for t, p in queue_names(topics, partitions)]
    total = rate * (warmup + seconds)
    started = time.time()
    append_at_rate(writers, rate, total, b"fresh", 300)
    written = "NOT (topic = 'fresh' AND partition = 0)"  # all but the first message
    while spark.read.format("delta").load(str(table)).where(written).count() < total:
        time.sleep(0.5)
    stop.set()
    job.join()
    commits = commit_times(str(table))
    # Messages of the first --warmup seconds are written but not measured: the first batches of
    # a query pay for class loading and JIT compilation.
    rows = (spark.read.format("delta").load(str(table)).where(written)
            .selectExpr("ingestBatchId", "unix_micros(storeTimestamp) / 1e6 AS appended")
            .where(f"appended >= {started + warmup}").collect())
    lags = sorted(commits[r.ingestBatchId] - r.appended for r in rows)
    if not lags:
        raise SystemExit("freshness: no message was appended after the warm-up; raise --seconds or --rate")
    # A batch of a few hundred messages costs more than the 1 s trigger, so batches run back to
    # back: the time between two commits is what one micro-batch costs, almost all of it fixed.
    # Batches: those that wrote measured messages (not the warm-up's).
    during = sorted(t for b, t in commits.items() if b in {r.ingestBatchId for r in rows})
    gaps = sorted(b - a for a, b in zip(during, during[1:]))
    return {"rate_per_s": rate, "seconds": seconds, "warmup_s": warmup, "topics": topics, "partitions": partitions,
            "messages": len(lags), "trigger": "1 second",
            "freshness_p50_s": quantile(lags, 0.50), "freshness_p95_s": quantile(lags, 0.95),
            "freshness_max_s": lags[-1],
            "batches": len(during), "batch_interval_median_s": gaps[len(gaps) // 2] if gaps else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backlog", type=int, default=2_000_000, help="messages in the backlog run (default 2,000,000)")
    p.add_argument("--rate", type=int, default=300, help="appends per second in the freshness run (default 300)")
    p.add_argument("--seconds", type=int, default=40, help="length of the freshness run (default 40)")
    p.add_argument("--topics", type=int, default=1,
                   help="topics the freshness writer spreads over (default 1; issue 19's spread case: 500)")
    p.add_argument("--partitions", type=int, default=2, help="partitions per topic (default 2)")
    p.add_argument("--warmup", type=int, default=10,
                   help="seconds the writer appends before the measured --seconds (default 10)")
    args = p.parse_args()
    if min(args.backlog, args.warmup) < 0 or min(args.rate, args.seconds, args.topics, args.partitions) < 1:
        p.error("--backlog and --warmup must be >= 0; --rate, --seconds, --topics and --partitions >= 1")

    from msglake.pipelines.session import build_session

    spark = build_session(settings_for(REPO / "bench-data" / "lake-stream", REPO), app_name="msglake-bench-stream")
    out = {}
    if args.backlog:
        out["backlog"] = backlog(spark, args.backlog)
        b = out["backlog"]
        print(f"backlog: {b['messages']:,} messages in {b['batches']} batches, {b['seconds']:.1f}s: "
              f"{b['messages_per_s']:,.0f} msg/s, {b['mb_per_s']:.1f} MB/s", flush=True)
    out["freshness"] = freshness(spark, args.rate, args.seconds, args.topics, args.partitions, args.warmup)
    f = out["freshness"]
    print(f"freshness at {f['rate_per_s']} msg/s over {f['topics']} topic(s) x {f['partitions']} partition(s), "
          f"1 s trigger: p50 {f['freshness_p50_s']:.2f}s, "
          f"p95 {f['freshness_p95_s']:.2f}s, max {f['freshness_max_s']:.2f}s over {f['messages']:,} messages; "
          f"{f['batches']} batches, median {f['batch_interval_median_s']:.2f}s between commits", flush=True)
    write("stream", out)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
