"""Many small segments: a batch read of the msglake source over an nsqd data path of small files.

    .venv/bin/python benchmarks/bench_small_segments.py [--messages 60000] [--segment-kib 16]

Generates (once, under bench-data/small-segments-N-K/) sample NSQ segments that roll every K KiB,
so a few tens of MB come as thousands of files, as a broker with many topics and small segments
leaves them; then, in one session, counts the source's rows twice (the second is timed) and
reports the Spark tasks the planner made. Tasks follow bytes, not files: small ranges are packed
into one task up to ``splitBytes`` (each range counted with a 1 MiB open cost).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=60_000)
    p.add_argument("--segment-kib", type=int, default=16)
    args = p.parse_args()

    from msglake.pipelines import settings as S
    from msglake.pipelines.session import build_session
    from msglake.samples.nsq import generate

    base = REPO / "bench-data" / f"small-segments-{args.messages}-{args.segment_kib}"
    data = base / "nsq"
    if not (base / ".built").exists():
        generate(str(data), args.messages, max_bytes_per_file=args.segment_kib << 10, bad_inputs=False)
        (base / ".built").touch()
    files = sum(len(names) for _, _, names in os.walk(data))
    size = sum(f.stat().st_size for f in data.rglob("*.dat"))
    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(base / "lake")
    spark = build_session(S.from_dict(doc, "bench_small_segments"))
    df = spark.read.format("msglake").option("format", "nsq-ext").option("path", str(data)).load()
    df.count()  # warm-up: JVM, Python workers
    started = time.monotonic()
    rows = df.count()
    took = time.monotonic() - started
    tasks = df.rdd.getNumPartitions()
    print(f"{files:,} files, {size / 1e6:.1f} MB, {rows:,} rows: {tasks:,} tasks, {took:.1f} s, "
          f"{rows / took:,.0f} rows/s")
    write("small-segments", {"files": files, "bytes": size, "rows": rows, "tasks": tasks, "seconds": took})


if __name__ == "__main__":
    main()
