"""Time `msglake history ID` (one message's story) on a lake of N messages, after `msglake optimize`.

    .venv/bin/python benchmarks/bench_history.py [--messages 5000000] [--master local[2]]

Uses bench_replay.py's lake (bench-data/replay-N/, built once: every fate, consumer events),
compacts it with `msglake optimize`, then looks up ids in one session as a notebook user
would, each story checked against its topic's expected shape: five messages in topics whose
fates are their own (orders: TTL chain into a cycle; tasks: delivery limit; rework: a
rejection loop) and one in a topic with a length limit (jobs, evaluated whole). Reports each
lookup and the median of the five; the first lookup of a fresh session is timed apart.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs
from bench_replay import bench_lake

REPO = Path(__file__).resolve().parent.parent
#: Messages are spread over the topics by id modulo 7 (bench_replay.TOPICS): these are in orders,
#: tasks, rework, orders and tasks.
IDS = (7, 3, 5, 700_007, 1_400_003)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=5_000_000, help="messages (default 5,000,000)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = p.parse_args()

    from msglake.pipelines.jobs.history import history
    from msglake.pipelines.jobs.maintenance import optimize

    lake, _, settings, spark = bench_lake(args.messages, args.master, "bench-history")
    if not (lake / ".optimized").exists():
        started = time.monotonic()
        optimize(spark, settings, ["messages", "consumer_events"])
        (lake / ".optimized").write_text("ok")
        print(f"optimized in {time.monotonic() - started:.1f}s", flush=True)
    t = dt.datetime(2026, 11, 1, 4, tzinfo=dt.timezone.utc)  # after every store and TTL
    ids = [f"m{i % args.messages:010d}" for i in IDS]
    times, shapes = [], {}
    started = time.monotonic()
    story = history(spark, settings, ids[0], as_of=t, max_hops=4)
    first = time.monotonic() - started
    for mid in ids:
        started = time.monotonic()
        story = history(spark, settings, mid, as_of=t, max_hops=4)
        times.append(round(time.monotonic() - started, 2))
        shapes[mid] = [(c["topic"], c["state"], c["stateReason"]) for c in story.copies]
    started = time.monotonic()
    coupled = history(spark, settings, "m0000000001", as_of=t, max_hops=4)  # jobs: maxLength
    coupled_s = time.monotonic() - started
    ok = all(shapes[m] for m in ids) and coupled.whole_topics == ["jobs"]
    result = {"messages": args.messages, "master": args.master, "first_lookup_s": round(first, 2),
              "lookups_s": times, "median_s": statistics.median(times), "coupled_lookup_s": round(coupled_s, 2),
              "stories": shapes, "checks_ok": ok}
    print(json.dumps(result, indent=2))
    write("history", result)
    return 0 if ok else 1


if __name__ == "__main__":
    os.chdir(REPO)
    sys.path.insert(0, str(REPO / "benchmarks"))
    sys.exit(main())
