"""Ingest throughput: generate NSQ segments, then time the codec alone and the Spark ingest job.

    .venv/bin/python benchmarks/bench_ingest.py [--messages 1000000] [--master local[2]]

Writes benchmarks/results/ingest-<timestamp>.json and prints a summary. The data set is
generated once per size under bench-data/ and reused by later runs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the data set (default 1,000,000)")
    p.add_argument("--master", default="local[2]", help="Spark master for the ingest run (default local[2])")
    p.add_argument("--segment-bytes", type=int, default=100 << 20, help="segment size (default nsqd's 100 MiB)")
    args = p.parse_args()

    from formats.base import decode_root
    from formats.nsq_ext import NsqExtCodec
    from formats.nsq_samples import generate
    from pipelines import settings as S
    from pipelines.ingest import ingest
    from pipelines.session import build_session

    data = REPO / "bench-data" / f"nsq-{args.messages}"
    if not (data / ".complete").exists():
        shutil.rmtree(data, ignore_errors=True)
        t = time.monotonic()
        truth = generate(str(data), args.messages, max_bytes_per_file=args.segment_bytes, bad_inputs=False)
        (data / ".complete").write_text(str(len(truth.messages)))
        print(f"generated {len(truth.messages):,} messages in {time.monotonic() - t:.1f}s", flush=True)
    expected = int((data / ".complete").read_text())
    on_disk = sum(f.stat().st_size for f in data.rglob("*.dat") if "diskqueue.0" in f.name and "meta" not in f.name)

    t = time.monotonic()
    decoded = decode_root(NsqExtCodec(), str(data))
    decode_s = time.monotonic() - t
    n_decoded = decoded.messages.num_rows
    assert n_decoded == expected, (n_decoded, expected)
    del decoded
    print(f"decode only (1 core, no Spark): {n_decoded / decode_s:,.0f} msg/s, "
          f"{on_disk / decode_s / 1e6:,.1f} MB/s", flush=True)

    lake = REPO / "bench-data" / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    doc = S.load(S.DEFAULT_CONF, env={}).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = args.master
    doc["sources"] = [{"name": "bench", "format": "nsq-ext", "path": str(data)}]
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

    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform()},
        "messages": expected,
        "segment_bytes_on_disk": on_disk,
        "decode": {"seconds": decode_s, "messages_per_s": n_decoded / decode_s, "mb_per_s": on_disk / decode_s / 1e6},
        "ingest": {"master": args.master, "batches": summary.batches, "seconds": ingest_s,
                   "messages_per_s": expected / ingest_s, "mb_per_s": on_disk / ingest_s / 1e6},
    }
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"ingest-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
