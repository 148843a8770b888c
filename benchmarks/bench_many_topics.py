"""Many topics: the same messages as 10,000 small segments and as 10 large ones, ingested end to end.

    .venv/bin/python benchmarks/bench_many_topics.py [--topics 500] [--partitions 2] [--segments 10]
        [--segment-kib 64] [--repeat 2]

An nsqd with hundreds of topics leaves as many small segment files as it has topic partitions;
issue 19 asks that such a backlog ingest within 1.5x the time of the same bytes in a few large
segments. Two data paths are written once under bench-data/many-topics-<T>x<P>x<S>-<K>/ with the
same records (bodies 200-900 B, go-nsq JSON headers with a trace id, tags and keys):

- ``small``: T topics x P partitions, each rolled every K KiB into S segments;
- ``large``: the same records, in the same order per queue, in 10 queues (5 topics x 2
  partitions) of one segment each.

Then, in one warm session (local[2], the default settings: retry marking and quality rules on),
each is ingested into a fresh lake ``--repeat`` times, alternating, and the best run of each is
reported with its Spark tasks per micro-batch, the ratio small / large and the target. Writes
benchmarks/results/many-topics-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent
TS0 = 1_793_500_000_000_000_000
#: Queues of the ``large`` layout: 5 topics x 2 partitions, one segment each.
LARGE_TOPICS, LARGE_PARTITIONS = 5, 2


def record(rng: random.Random, i: int) -> tuple[bytes, dict]:
    """Message ``i``: a body and the JSON header a go-nsq producer writes."""
    header = {"##trace_id": str(rng.getrandbits(63)), "##client_dispatch_tag": rng.choice(["created", "paid"]),
              "keys": f"k{i} order-{i % 97}", "app": rng.choice(["shop", "billing"])}
    return rng.randbytes(rng.randint(200, 900)), header


def write_small(root: Path, topics: int, partitions: int, segments: int, segment_kib: int, seed: int) -> int:
    """T x P queues of S segments of about ``segment_kib`` KiB each; returns the records written."""
    from msglake.samples.nsq_writer import NsqQueueWriter

    rng, n = random.Random(seed), 0
    for t in range(topics):
        for p in range(partitions):
            with NsqQueueWriter(str(root), f"topic{t:04d}", p, max_bytes_per_file=segment_kib << 10) as w:
                while w.file_num < segments:  # (the roll after the last one leaves an empty live segment)
                    body, header = record(rng, n)
                    w.put(body, header=header, timestamp_ns=TS0 + n)
                    n += 1
    return n


def write_large(root: Path, small: Path, total: int) -> int:
    """The records of ``small`` (re-read from its segments, in order) in 10 one-segment queues."""
    from msglake.formats.base import decode_root
    from msglake.formats.nsq_ext import NsqExtCodec
    from msglake.samples.nsq_writer import NsqQueueWriter

    table = decode_root(NsqExtCodec(), str(small)).table
    writers = [NsqQueueWriter(str(root), f"big{t}", p, max_bytes_per_file=1 << 40)
               for t in range(LARGE_TOPICS) for p in range(LARGE_PARTITIONS)]
    bodies, traces = table["body"].to_pylist(), table["traceId"].to_pylist()
    headers = table["headers"].to_pylist()
    for i, (body, trace, header) in enumerate(zip(bodies, traces, headers)):
        writers[i % len(writers)].put(body, header=dict(header), timestamp_ns=TS0 + i)
    for w in writers:
        w.close()
    assert len(bodies) == total, (len(bodies), total)
    return len(bodies)


def ensure(base: Path, args) -> int:
    if not (base / ".built").exists():
        shutil.rmtree(base, ignore_errors=True)
        started = time.monotonic()
        n = write_small(base / "small", args.topics, args.partitions, args.segments, args.segment_kib, seed=7)
        write_large(base / "large", base / "small", n)
        (base / ".built").write_text(str(n))
        print(f"wrote {n:,} messages twice in {time.monotonic() - started:.0f}s", flush=True)
    return int((base / ".built").read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topics", type=int, default=500)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--segments", type=int, default=10)
    p.add_argument("--segment-kib", type=int, default=64)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)

    from suite import forget, settings_for, ingest_run  # noqa: E402  (benchmarks/ is on sys.path)
    from msglake.pipelines.session import build_session

    base = REPO / "bench-data" / f"many-topics-{args.topics}x{args.partitions}x{args.segments}-{args.segment_kib}"
    expected = ensure(base, args)
    layouts = {"small": base / "small", "large": base / "large"}
    from msglake.formats.nsq_layout import SEGMENT_RE

    segs = {k: [f.stat().st_size for f in v.rglob("*.dat") if SEGMENT_RE.match(f.name)] for k, v in layouts.items()}
    files = {k: sum(1 for size in v if size) for k, v in segs.items()}  # non-empty segments
    nbytes = {k: sum(v) for k, v in segs.items()}
    lake = base / "lake"
    spark, runs = None, {k: [] for k in layouts}
    for _ in range(args.repeat):
        for name, data in layouts.items():
            settings = settings_for(lake, data, "nsq-ext", "local[2]", "6g", semantics=True)
            spark = spark or build_session(settings, app_name="msglake-bench-many-topics")
            forget(spark, lake)
            r = ingest_run(spark, settings, expected)
            runs[name].append(r)
            print(f"{name}: {files[name]:,} segments, {nbytes[name] / 1e6:,.0f} MB, {r['batches']} batch(es): "
                  f"{r['seconds']:.1f} s, {r['messagesPerS']:,.0f} msg/s", flush=True)
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    ratio = best["small"]["seconds"] / best["large"]["seconds"]
    verdict = "met" if ratio <= 1.5 else "not met"
    print(f"| layout | segments | MB | best s | msg/s |\n|---|---:|---:|---:|---:|")
    for k, r in best.items():
        print(f"| {k} | {files[k]:,} | {nbytes[k] / 1e6:,.0f} | {r['seconds']:.1f} | {r['messagesPerS']:,.0f} |")
    print(f"small / large: {ratio:.2f}x (target <= 1.5x: {verdict})")
    write("many-topics", {"messages": expected, "files": files, "bytes": nbytes, "runs": runs,
                          "ratio": ratio, "args": vars(args)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
