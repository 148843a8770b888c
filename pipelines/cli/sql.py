"""``msglake sql``: Spark SQL on the lake's tables and views, read-only unless asked otherwise."""
from __future__ import annotations

import sys

from msglake.pipelines.cli.common import load_settings


def register(sub, common) -> None:
    sq = sub.add_parser(
        "sql", parents=[common], help="run a Spark SQL statement against the lake's tables",
        description="Run one Spark SQL statement against the lake's tables (messages, quarantine, "
                    "consumer_offsets, ...: registered from the lake folder) and print the result. Read-only: "
                    "a statement that would change the lake (INSERT, DELETE, MERGE, CREATE, DROP, ALTER, "
                    "OPTIMIZE, VACUUM, ...) is refused unless --allow-writes is given; SHOW, DESCRIBE and "
                    "EXPLAIN are fine.",
    )
    sq.add_argument("query", help="the SQL statement, e.g. \"SELECT topic, count(*) FROM messages GROUP BY topic\"")
    sq.add_argument("--format", choices=("table", "json", "csv"), default="table",
                    help="table (default), json (one object per line; binary as base64) or csv (with a header)")
    sq.add_argument("--limit", type=int, default=1000, help="rows printed at most (default 1,000)")
    sq.add_argument("--allow-writes", action="store_true", help="let the statement change tables")
    sq.set_defaults(handler=sql)


def sql(args) -> int:
    from msglake.pipelines.jobs.sql import render, run_sql
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    spark = build_session(settings)
    df = run_sql(spark, args.query, allow_writes=args.allow_writes)
    sys.stdout.write(render(df, args.format, args.limit))
    return 0
