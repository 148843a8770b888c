"""``msglake sql`` (one statement, read-only unless asked otherwise) and ``msglake serve`` (a warm
query server that ``msglake sql`` uses when it runs)."""
from __future__ import annotations

import sys

from msglake.pipelines.cli.common import load_settings, served

READ_ONLY = ("Read-only (the default) means the statement reads the lake's tables and views and nothing else, and "
             "changes nothing: queries (SELECT, WITH, set operations, VALUES), SHOW, DESCRIBE and EXPLAIN of those, "
             "on the lake's tables and views by name (time travel included). Refused before anything runs (exit "
             "status 2): writes and commands of every kind (INSERT incl. INSERT OVERWRITE DIRECTORY, DELETE, UPDATE, "
             "MERGE, CREATE, DROP, ALTER, RESTORE, OPTIMIZE, VACUUM, CACHE, SET, ADD JAR, EXECUTE IMMEDIATE...), "
             "more than one statement, file and path relations (text.`/path`, parquet.`...`, delta.`...`, "
             "read_files), java_method/reflect and user-defined functions.")


def register(sub, common) -> None:
    sq = sub.add_parser(
        "sql", parents=[common], help="run a Spark SQL statement against the lake's tables",
        description="Run one Spark SQL statement against the lake's tables (messages, quarantine, "
                    "consumer_offsets, ...) and views (v_messages, v_trace, v_dead_letters, v_backlog) and print "
                    "the result. " + READ_ONLY + " When `msglake serve` runs for the same lake, the statement is "
                    "sent to it (about a second instead of ~10 s of Spark start); otherwise it runs in this process.",
    )
    sq.add_argument("query", help="the SQL statement, e.g. \"SELECT topic, count(*) FROM messages GROUP BY topic\"")
    sq.add_argument("--format", choices=("table", "json", "csv"), default="table",
                    help="table (default), json (one object per line; binary as base64) or csv (with a header)")
    sq.add_argument("--limit", type=int, default=1000, help="rows printed at most (default 1,000)")
    sq.add_argument("--allow-writes", action="store_true",
                    help="let the statement change tables (maintenance; never sent to the server)")
    sq.add_argument("--in-process", action="store_true", help="do not use a running `msglake serve`")
    sq.set_defaults(handler=sql)

    sv = sub.add_parser(
        "serve", parents=[common], help="keep a warm Spark session answering read-only SQL (Arrow Flight SQL)",
        description="Start one Spark session for the lake and answer read-only SQL on 127.0.0.1 over Arrow Flight "
                    "SQL (the ADBC Flight SQL driver, Flight SQL JDBC/ODBC drivers and BI tools such as DBeaver "
                    "speak it: grpc://127.0.0.1:PORT, no TLS, no authentication). `msglake sql` and "
                    "`msglake history` use it while it runs; it writes where it listens to <lake>/_server.json. "
                    "Every statement is checked like `msglake sql` checks it: " + READ_ONLY
                    + " Stops on Ctrl-C or SIGTERM.",
    )
    sv.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free port)")
    sv.set_defaults(handler=serve)


def sql(args) -> int:
    from msglake.errors import ConfigError
    from msglake.pipelines.cli.common import non_negative

    non_negative(args.limit, "--limit")
    if args.limit == 0:
        raise ConfigError("--limit: must be 1 or more")
    settings = load_settings(args)
    if not args.allow_writes and not args.in_process:
        from msglake.pipelines.jobs.serve import SQL_ACTION, ask_server, find_server

        uri = find_server(settings)
        request = {"sql": args.query, "format": args.format, "limit": args.limit}
        reply = ask_server(uri, SQL_ACTION, request) if uri else None
        if reply is not None:
            return served(reply)

    from msglake.pipelines.jobs.sql import render, run_sql
    from msglake.pipelines.session import build_session

    spark = build_session(settings, segments=False)
    df = run_sql(spark, args.query, allow_writes=args.allow_writes)
    sys.stdout.write(render(df, args.format, args.limit))
    return 0


def serve(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.serve import serve as run_server
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    check_lake_root(settings.lake.root, write=True)  # it records its address in the lake
    # A history lookup's rounds leave local checkpoints that Spark removes once the JVM has
    # collected their frames; by default it forces a collection every 30 minutes, too rarely
    # for a server answering lookup after lookup.
    settings.spark.conf.setdefault("spark.cleaner.periodicGC.interval", "2min")
    spark = build_session(settings, segments=False)

    def ready(server) -> None:
        print(f"msglake: serving the lake {settings.lake.table_path('')} read-only on grpc://127.0.0.1:{server.port} "
              "(Arrow Flight SQL); msglake sql and msglake history use it; Ctrl-C stops", flush=True)

    run_server(spark, settings, args.port, ready)
    return 0
