"""What the quality rules cost a micro-batch: each rule's check, all of them, and the ingest sink's
per-batch metrics with and without them, over the suite's decoded messages, in Spark (local[2]).

    .venv/bin/python benchmarks/bench_rules.py [--messages 1000000] [--format rocketmq-commitlog]
        [--repeat 3]

The input is the suite's Parquet copy of a data set's decoded messages (bench-data/suite-<format>-<N>/,
generated once), cached in memory first, so that each figure is the expressions' own cost, not
the read's. Each figure is the fastest of ``--repeat`` aggregations over every row. Next to the
rules as they are, the forms they replaced, on the same rows: RocketMQ ids checked by ``rlike``
(``quality.rules.ROCKETMQ_ID``) and a prefix glob of a topic policy matched by ``rlike``.
Writes benchmarks/results/rules-<timestamp>.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from results_file import write
from suite import REPO, base_dir, data_dir, ensure_data, ensure_parquet, log, settings_for


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000, help="the suite's data set to use (default 1000000)")
    p.add_argument("--format", default="rocketmq-commitlog", choices=("nsq-ext", "rocketmq-commitlog"))
    p.add_argument("--repeat", type=int, default=3, help="aggregations per figure, the fastest counts (default 3)")
    args = p.parse_args(argv)
    os.chdir(REPO)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import functions as F

    from msglake.pipelines.io.sinks import BatchPlan
    from msglake.pipelines.session import build_session
    from msglake.quality import rules as R

    data = data_dir(args.format, args.messages)
    expected = ensure_data(args.format, data, args.messages)
    parquet = base_dir(args.format, args.messages) / "parquet"
    ensure_parquet(args.format, data, parquet, expected)
    lake = REPO / "bench-data" / "bench-rules"
    settings = settings_for(lake, lake, args.format, "local[2]", "6g", semantics=True)
    spark = build_session(settings, app_name="msglake-bench-rules", master="local[2]")
    # The source columns the sink's metrics read besides the messages' own.
    df = (spark.read.parquet(str(parquet)).withColumn("reason", F.lit(None).cast("string"))
          .withColumn("recordLength", F.col("bodySize") + 100)).cache()
    assert df.count() == expected
    ctx, levels = settings.quality.rule_context(settings.policies), R.active(settings.quality.levels())

    def best(cols, frame=df) -> float:
        runs = []
        for _ in range(args.repeat):
            started = time.monotonic()
            frame.agg(*cols).collect()
            runs.append(time.monotonic() - started)
        return min(runs)

    figures = {"count (the rows alone)": best([F.count("*")])}
    for name in levels:
        figures[f"rule {name}"] = best([F.count(R.RULES[name].check(ctx))])
    figures["every rule (the _checks column)"] = best([F.sum(F.size(R.violations(ctx, levels)))])
    with_rules, without = BatchPlan(ctx, levels), BatchPlan(ctx, {})
    figures["sink metrics, rules on"] = best([*with_rules.metrics, with_rules.framed], with_rules.checked(df))
    figures["sink metrics, rules off"] = best([*without.metrics, without.framed], without.checked(df))
    ids = [F.col("messageId"), F.col("uniqueId")]
    figures["RocketMQ id checks (both ids), length and unhex"] = best([F.count(F.when(R.rocketmq_id(c), 1)) for c in ids])
    figures["RocketMQ id checks (both ids), rlike (before)"] = best([F.count(F.when(c.rlike(R.ROCKETMQ_ID), 1))
                                                                     for c in ids])
    figures["topic glob orders*, startswith"] = best([F.count(F.when(F.col("topic").startswith("orders"), 1))])
    figures["topic glob orders*, rlike (before)"] = best([F.count(F.when(F.col("topic").rlike(r"^(?s:orders.*)\z"), 1))])
    spark.stop()
    result = {"format": args.format, "messages": expected, "repeat": args.repeat,
              "seconds": {k: round(v, 3) for k, v in figures.items()}}
    path = write("rules", result)
    lines = [f"Quality rules over {expected:,} decoded {args.format} messages (cached), local[2], "
             f"fastest of {args.repeat}:", "", "| expressions | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in figures.items()]
    md = "\n".join(lines) + "\n"
    path.with_suffix(".md").write_text(md)
    log(f"wrote {path.with_suffix('.md')}")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
