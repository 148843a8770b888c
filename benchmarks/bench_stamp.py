"""What a batch's id and time written as literals cost an ingest: Spark writes such a literal's
value into the code it generates, so the write of every batch was compiled anew (Janino, then
the JVM's JIT); ``BatchPlan.stamped`` reads them from a one-row relation instead.

    .venv/bin/python benchmarks/bench_stamp.py [--messages 1000000] [--format rocketmq-commitlog]
        [--pairs 3]

One session (local[2]), the suite's data set (bench-data/suite-<format>-<N>/, generated once)
ingested with the defaults (retry marking and quality rules on) into an empty lake, the two
forms alternated: ``literals`` (the batch's id and ``current_timestamp()`` in the plan) and
``relation`` (as msglake writes). Each form first ingests the suite's warm-up set once,
untimed. Prints each run's seconds and what it cost the JVM (classes generated, JIT, GC, CPU;
benchmarks/jvm_work.py); writes benchmarks/results/stamp-<timestamp>.json.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

from jvm_work import line
from results_file import write
from suite import REPO, WARMUP, data_dir, ensure_data, forget, ingest_run, log, settings_for


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="the suite's data set to use (default 1000000)")
    p.add_argument("--format", default="rocketmq-commitlog", choices=("nsq-ext", "rocketmq-commitlog"))
    p.add_argument("--pairs", type=int, default=3, help="runs of each form, alternated (default 3)")
    args = p.parse_args(argv)
    if args.pairs < 1:
        p.error("--pairs must be >= 1")
    os.chdir(REPO)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from msglake.pipelines.io.sinks import BatchPlan
    from msglake.pipelines.session import build_session

    relation = BatchPlan.stamped

    def literals(df, batch_id, at):
        return df.select("*", F.current_timestamp().alias(at), F.lit(batch_id).cast("bigint").alias("ingestBatchId"))

    forms = {"literals": staticmethod(literals), "relation": staticmethod(relation)}
    warm = data_dir(args.format, f"warmup-{WARMUP}")
    warm_n = ensure_data(args.format, warm, WARMUP)
    data = data_dir(args.format, args.messages)
    expected = ensure_data(args.format, data, args.messages)
    lake = REPO / "bench-data" / "stamp-lake"
    spark = build_session(settings_for(lake, lake, args.format, "local[2]", "6g", semantics=True),
                          app_name="msglake-bench-stamp", master="local[2]")

    def run(form: str, path, n: int) -> dict:
        """One ingest into an empty lake; ``ingest_run`` records its JVM work (``jvm``)."""
        BatchPlan.stamped = forms[form]
        shutil.rmtree(lake, ignore_errors=True)
        out = ingest_run(spark, settings_for(lake, path, args.format, "local[2]", "6g", semantics=True), n)
        forget(spark, lake)
        return out

    for form in forms:
        log(f"{form}: warm-up ingest of {warm_n:,} messages (untimed)")
        run(form, warm, warm_n)
    runs = {form: [] for form in forms}
    for i in range(args.pairs):
        for form in (forms if i % 2 == 0 else reversed(list(forms))):
            out = run(form, data, expected)
            runs[form].append(out)
            log(f"{form}: {out['seconds']:.1f} s; {line(out['jvm'])}")
    BatchPlan.stamped = forms["relation"]
    spark.stop()
    summary = {form: {"medianSeconds": statistics.median(r["seconds"] for r in rs),
                      "medianClasses": statistics.median(r["jvm"]["classesCompiled"] for r in rs),
                      "medianJitS": statistics.median(r["jvm"]["jitMs"] for r in rs) / 1000}
               for form, rs in runs.items()}
    write("stamp", {"format": args.format, "messages": expected, "runs": runs, "summary": summary})
    print("| form | median s | classes generated | JIT s |\n|---|---|---|---|")
    for form, s in summary.items():
        print(f"| {form} | {s['medianSeconds']:.1f} | {s['medianClasses']:.0f} | {s['medianJitS']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
