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
import json
import os
import statistics
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs
from bench_replay import POLICIES, build

REPO = Path(__file__).resolve().parent.parent
#: Messages are spread over the topics by id modulo 7 (bench_replay.TOPICS): these are in orders,
#: tasks, rework, orders and tasks.
IDS = (7, 3, 5, 700_007, 1_400_003)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=5_000_000, help="messages (default 5,000,000)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = p.parse_args()

    from msglake.pipelines import settings as S
    from msglake.pipelines.jobs.history import history
    from msglake.pipelines.jobs.maintenance import optimize
    from msglake.pipelines.session import build_session

    lake = REPO / "bench-data" / f"replay-{args.messages}"
    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = args.master
    doc["spark"]["conf"]["spark.driver.memory"] = "6g"
    doc["policies"] = POLICIES
    settings = S.from_dict(doc, "bench")
    spark = build_session(settings, app_name="bench-history")
    if not (lake / ".complete").exists():
        lake.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        build(spark, lake, args.messages)
        (lake / ".complete").write_text("ok")
        print(f"built the lake in {time.monotonic() - started:.1f}s", flush=True)
    if not (lake / ".optimized").exists():
        started = time.monotonic()
        optimize(spark, settings, ["messages", "consumer_events"])
        (lake / ".optimized").write_text("ok")
        print(f"optimized in {time.monotonic() - started:.1f}s", flush=True)
    as_of = "2026-11-01T04:00:00+00:00"
    import datetime as dt

    t = dt.datetime.fromisoformat(as_of)
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
