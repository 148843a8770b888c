"""Trace lookup by traceId on a lake of N messages, before and after `msglake optimize`, and a full quality run.

    .venv/bin/python benchmarks/bench_trace.py [--messages 5000000] [--trigger-mib 64]

Builds once, under bench-data/trace-N/: sample NSQ segments (`msglake generate`'s data, real
layout) and a lake ingested from them as the scheduled job does (`--trigger-mib` MiB per
micro-batch, so `messages` holds the many files a stream leaves behind). Then, in one session:

1. picks 5 traceIds spread over the table (fixed by a hash, the same every run);
2. times `SELECT * FROM messages WHERE traceId = ?` (collect) for each, after one warm-up
   query, and `SELECT * FROM v_trace WHERE traceId = ?`; reports the median and the files;
3. runs `msglake optimize` on messages (Z-ORDER BY traceId), timed;
4. times the same lookups again;
5. times `msglake quality --table messages` over the whole table.

The lake is copied before optimizing so a re-run measures "before" on the original files.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent
LOOKUPS = 5


def settings_for(lake: Path, data: Path, master: str, trigger_bytes: int):
    from msglake.pipelines import settings as S

    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = master
    doc["spark"]["conf"]["spark.driver.memory"] = "6g"
    doc["sources"] = [{"name": "bench", "format": "nsq-ext", "path": str(data), "storeHost": "10.0.0.1:4150"}]
    doc["ingest"]["maxBytesPerTrigger"] = trigger_bytes
    return S.from_dict(doc, "bench_trace")


def build(base: Path, n: int, trigger_bytes: int, master: str) -> dict:
    """Segments and the ingested lake, made once per N (a marker file says it finished)."""
    from msglake.samples.nsq import generate

    data, lake, done = base / "nsq", base / "lake", base / ".built"
    if done.exists():
        return {}
    shutil.rmtree(base, ignore_errors=True)
    started = time.monotonic()
    generate(str(data), n, bad_inputs=False, max_bytes_per_file=256 << 20)
    generated = time.monotonic() - started
    print(f"generated {n:,} messages in {generated:.0f}s", flush=True)
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.session import build_session

    settings = settings_for(lake, data, master, trigger_bytes)
    spark = build_session(settings, app_name="bench-trace-build")
    summary = ingest(spark, settings)
    print("\n".join(summary.lines()), flush=True)
    spark.stop()
    done.write_text("ok")
    return {"generateSeconds": round(generated, 1), "ingestSeconds": round(summary.seconds, 1),
            "ingestBatches": summary.batches}


def table_files(spark, path: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def lookups(spark, trace_ids: list[str]) -> dict:
    """Median seconds of a lookup by traceId on messages and on v_trace (rows found, to check)."""
    out = {}
    for name, sql in (("messages", "SELECT * FROM messages WHERE traceId = '{}'"),
                      ("v_trace", "SELECT * FROM v_trace WHERE traceId = '{}'")):
        spark.sql(sql.format(trace_ids[0])).collect()  # warm-up: plan caches, Delta snapshot
        times, rows = [], []
        for t in trace_ids:
            started = time.monotonic()
            rows.append(len(spark.sql(sql.format(t)).collect()))
            times.append(time.monotonic() - started)
        out[name] = {"medianSeconds": round(statistics.median(times), 3), "seconds": [round(x, 3) for x in times],
                     "rows": rows}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=5_000_000)
    p.add_argument("--trigger-mib", type=int, default=64, help="maxBytesPerTrigger of the ingest, MiB (default 64)")
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from pyspark.sql import functions as F

    from msglake.pipelines.jobs.maintenance import optimize
    from msglake.pipelines.jobs.quality import run_quality
    from msglake.pipelines.session import build_session

    base = REPO / "bench-data" / f"trace-{args.messages}"
    built = build(base, args.messages, args.trigger_mib << 20, args.master)
    work = base / "lake-run"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base / "lake", work, ignore=shutil.ignore_patterns("_checkpoints"))
    settings = settings_for(work, base / "nsq", args.master, args.trigger_mib << 20)
    spark = build_session(settings, app_name="bench-trace")
    path = settings.lake.table_path("messages")
    messages = spark.read.format("delta").load(path)
    total = messages.count()
    assert total >= args.messages, (total, args.messages)
    trace_ids = [r["traceId"] for r in messages.where(F.col("traceId").isNotNull())
                 .orderBy(F.xxhash64("traceId")).select("traceId").limit(LOOKUPS).collect()]
    files_before = table_files(spark, path)
    before = lookups(spark, trace_ids)
    print(f"before optimize ({files_before} files): {before}", flush=True)
    started = time.monotonic()
    [done] = optimize(spark, settings, ["messages"])
    optimize_seconds = time.monotonic() - started
    print(f"optimize: {done.line()} in {optimize_seconds:.1f}s", flush=True)
    files_after = table_files(spark, path)
    after = lookups(spark, trace_ids)
    print(f"after optimize ({files_after} files): {after}", flush=True)
    assert [a for a in after["messages"]["rows"]] == before["messages"]["rows"]
    started = time.monotonic()
    quality = run_quality(spark, settings, "messages", out_dir=str(base / "reports"))
    quality_seconds = time.monotonic() - started
    print("\n".join(quality.lines()), flush=True)
    result = {
        "messages": total, "master": args.master, "triggerMiB": args.trigger_mib, **built,
        "before": {"files": files_before, **before}, "optimizeSeconds": round(optimize_seconds, 1),
        "optimize": done.line(), "after": {"files": files_after, **after},
        "qualitySeconds": round(quality_seconds, 1), "qualityChecks": len(quality.report["results"]),
        "qualitySuccess": quality.report["success"],
    }
    write("trace", result)
    print(f"\n| messages | files before -> after | lookup messages before -> after | v_trace before -> after | "
          f"optimize | quality run |\n|---|---|---|---|---|---|\n| {total:,} | {files_before} -> {files_after} | "
          f"{before['messages']['medianSeconds']} s -> {after['messages']['medianSeconds']} s | "
          f"{before['v_trace']['medianSeconds']} s -> {after['v_trace']['medianSeconds']} s | "
          f"{optimize_seconds:.0f} s | {quality_seconds:.0f} s |")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
