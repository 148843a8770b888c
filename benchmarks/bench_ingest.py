"""Ingest throughput: generate broker data, then time the codec alone and the Spark ingest job.

    .venv/bin/python benchmarks/bench_ingest.py [--format nsq-ext|rocketmq-commitlog]
        [--messages 1000000] [--master local[2]] [--decode-only]

Writes benchmarks/results/ingest-<format>-<timestamp>.json and prints a summary. The data set is
generated once per size under bench-data/ and reused by later runs.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent


#: Segment / CommitLog file size of a generated data set: the broker's default.
DEFAULT_SEGMENT_BYTES = {"nsq-ext": 100 << 20, "rocketmq-commitlog": 1 << 30}


def ensure_data(fmt: str, data: Path, messages: int, segment_bytes: int | None = None) -> int:
    """Generate ``messages`` messages of ``fmt`` under ``data`` once (no bad inputs), return the
    messages (records) written. A ``.complete`` marker holding that count says the set is whole."""
    from msglake.samples import generate

    if not (data / ".complete").exists():
        shutil.rmtree(data, ignore_errors=True)
        t = time.monotonic()
        truth = generate(fmt, str(data), messages, segment_bytes=segment_bytes or DEFAULT_SEGMENT_BYTES[fmt],
                          bad_inputs=False)
        (data / ".complete").write_text(str(len(truth.messages)))
        print(f"generated {len(truth.messages):,} messages in {time.monotonic() - t:.1f}s", flush=True)
    return int((data / ".complete").read_text())


def decode_pass(fmt: str, data: Path, options: dict | None = None) -> tuple[int, int, float]:
    """The codec as a Spark task runs it: decode every file chunk by chunk, keeping nothing but
    counts (holding every row in memory would measure the allocator instead). The scan before it
    is the driver's planning, done once per trigger (and only over new bytes after the first),
    so it is not timed: for a live CommitLog it walks the whole file to find its end.
    ``options``: the codec's (default: its defaults).

    Returns (messages decoded, segment bytes that hold data, seconds)."""
    from msglake.formats.registry import get_codec

    codec = get_codec(fmt, options)
    segments = codec.scan(str(data)).segments
    t = time.monotonic()
    n_decoded = on_disk = 0
    for seg in segments:
        for res in codec.decode(str(data), seg, 0, seg.committed_end):
            n_decoded += res.batch.num_rows - res.batch.column("messageId").null_count
            # Bytes that hold data (a pre-sized CommitLog's zero tail is not data).
            on_disk += res.decoded_bytes + res.quarantined_bytes + res.padding_bytes
    return n_decoded, on_disk, time.monotonic() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the data set (default 1,000,000)")
    p.add_argument("--master", default="local[2]", help="Spark master for the ingest run (default local[2])")
    p.add_argument("--format", choices=("nsq-ext", "rocketmq-commitlog"), default="nsq-ext",
                   help="broker layout of the data set (default nsq-ext)")
    p.add_argument("--segment-bytes", type=int, default=None,
                   help="segment / CommitLog file size (default: the broker's, 100 MiB for nsqd, 1 GiB for RocketMQ)")
    p.add_argument("--decode-only", action="store_true", help="time the codec alone, skip the Spark ingest")
    args = p.parse_args()

    from msglake.pipelines import settings as S
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.session import build_session

    data = REPO / "bench-data" / f"{args.format}-{args.messages}"
    expected = ensure_data(args.format, data, args.messages, args.segment_bytes)
    n_decoded, on_disk, decode_s = decode_pass(args.format, data)
    assert n_decoded == expected, (n_decoded, expected)
    print(f"decode only (1 core, no Spark): {n_decoded:,} messages in {decode_s:.1f}s = {n_decoded / decode_s:,.0f} "
          f"msg/s, {on_disk / decode_s / 1e6:,.1f} MB/s", flush=True)
    result = {
        "format": args.format,
        "messages": expected,
        "segment_bytes_on_disk": on_disk,
        "decode": {"seconds": decode_s, "messages_per_s": n_decoded / decode_s, "mb_per_s": on_disk / decode_s / 1e6},
    }
    if args.decode_only:
        write(f"ingest-{args.format}", result)
        return 0

    lake = REPO / "bench-data" / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = args.master
    doc["sources"] = [{"name": "bench", "format": args.format, "path": str(data)}]
    settings = S.from_dict(doc, "benchmark settings")
    spark = build_session(settings, app_name="msglake-bench")
    summary = ingest(spark, settings)
    assert summary.messages == expected and summary.balanced, summary
    rows = spark.read.format("delta").load(settings.lake.table_path("messages")).count()
    assert rows == expected, (rows, expected)
    ingest_s = summary.seconds
    print(f"ingest end to end ({args.master}, {summary.batches} batches): {expected / ingest_s:,.0f} msg/s, "
          f"{on_disk / ingest_s / 1e6:,.1f} MB/s in {ingest_s:.1f}s", flush=True)
    spark.stop()
    result["ingest"] = {"master": args.master, "batches": summary.batches, "seconds": ingest_s,
                        "messages_per_s": expected / ingest_s, "mb_per_s": on_disk / ingest_s / 1e6}
    write(f"ingest-{args.format}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
