"""What planning a micro-batch costs the source before any task runs, no Spark: the scan of the
segment root and the split of its segments into tasks (``codec.scan``, ``codec.split_points``).

    .venv/bin/python benchmarks/bench_planning.py [--messages 1000000] [--formats nsq-ext,rocketmq-commitlog]
        [--split-bytes 67108864] [--repeat 3]

Uses the suite's data sets (bench-data/suite-<format>-<N>/data/, generated once). Each figure is
the fastest of ``--repeat`` runs, each with a codec made afresh (a codec remembers how far it
walked a live CommitLog, so a second scan with the same one walks only what was appended), after
one untimed run that loads the modules and warms the page cache.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from suite import FORMATS, REPO, codec_options, data_dir, ensure_data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="the suite's data set to use (default 1000000)")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    p.add_argument("--split-bytes", type=int, default=64 << 20, help="the tasks' target size (default 64 MiB, "
                   "ingest.splitBytes' default)")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure, the fastest counts (default 3)")
    args = p.parse_args(argv)
    os.chdir(REPO)
    from msglake.formats.registry import get_codec

    print(f"| format | segments | scan, s | split at {args.split_bytes:,} bytes, s | byte ranges (before packing) |")
    print("|---|---|---|---|---|")
    for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
        data = data_dir(fmt, args.messages)
        ensure_data(fmt, data, args.messages)
        scans, splits = [], []
        for i in range(args.repeat + 1):
            codec = get_codec(fmt, codec_options(fmt))
            started = time.monotonic()
            segments = codec.scan(str(data)).segments
            scanned = time.monotonic()
            cuts = [codec.split_points(str(data), s, 0, s.committed_end, args.split_bytes) for s in segments]
            done = time.monotonic()
            if i:  # the first run is untimed
                scans.append(scanned - started)
                splits.append(done - scanned)
        ranges = len(segments) + sum(map(len, cuts))
        print(f"| {fmt} | {len(segments)} | {min(scans):.3f} | {min(splits):.3f} | {ranges} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
