"""``msglake quality``: validate lake tables and write data-quality reports."""
from __future__ import annotations

import time

from msglake.pipelines.cli.common import emit, load_settings, parse_time


def register(sub, common) -> None:
    qa = sub.add_parser(
        "quality", parents=[common], help="validate lake tables and write data-quality reports",
        description="Validate a lake table with its great-expectations suite (quality/suites.py: keys, required "
                    "columns and value sets, and every row rule of quality.rules) and write, under "
                    "quality.reportDir (default <lake>/_reports), a JSON result and a self-contained HTML report "
                    "(per check pass/fail counts, sample failing rows, charts; readable offline). Each check's "
                    "result is appended to the quality_results table. Exit status: 0 when every error-level "
                    "check passed (warnings allowed), 1 when one failed, 2 on bad arguments or a missing table.",
    )
    qa.add_argument("--table", action="append", choices=("messages", "dead_letters", "quarantine"),
                    help="table to validate (repeatable; default: messages)")
    qa.add_argument("--since", metavar="T", help="only rows at or after T (ISO-8601 or epoch ms): ingestedAt for "
                    "messages, quarantinedAt for quarantine, the death time (storeTimestamp) for dead_letters")
    qa.add_argument("--out", metavar="DIR", help="folder for the reports (default: quality.reportDir)")
    qa.set_defaults(handler=quality)


def quality(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.quality import check_table, run_quality
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    since = parse_time(args.since, "--since") if args.since else None
    # Before Spark starts and before anything is written (the writable check makes the root).
    check_lake_root(settings.lake.root, write=False)
    for table in args.table or ["messages"]:
        check_table(settings, table)
    check_lake_root(settings.lake.root, write=True)  # quality_results is a table of the lake
    spark = build_session(settings, segments=False)
    worst = 0
    for table in args.table or ["messages"]:
        started = time.monotonic()
        run = run_quality(spark, settings, table, since, args.out)
        emit(run.lines())
        print(f"  took {time.monotonic() - started:.1f}s")
        worst = max(worst, 1 if run.errors else 0)
    return worst
