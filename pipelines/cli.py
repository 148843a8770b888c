"""The ``msglake`` command."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from pipelines import settings as settings_mod

DEMO_MESSAGES = 20_000


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--conf", metavar="FILE", default=os.environ.get("MSGLAKE_CONF"),
                        help="settings YAML (env MSGLAKE_CONF; default conf/base/msglake.yaml "
                             "merged with conf/local/msglake.yaml when present)")
    common.add_argument("--master", metavar="URL", default=os.environ.get("MSGLAKE_SPARK_MASTER"),
                        help="Spark master, e.g. local[2] or spark://host:7077 (env MSGLAKE_SPARK_MASTER; "
                             "default from settings: spark.master)")
    common.add_argument("--lake", metavar="DIR", default=os.environ.get("MSGLAKE_LAKE_ROOT"),
                        help="lake root folder holding the Delta tables (env MSGLAKE_LAKE_ROOT; "
                             "default from settings: lake.root)")

    p = argparse.ArgumentParser(
        prog="msglake",
        description="Turn message-broker segment files (NSQ extended disk queues, RocketMQ CommitLogs) into "
                    "Delta Lake tables.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ing = sub.add_parser(
        "ingest", parents=[common], help="ingest the configured sources into the lake (scheduled batch run)",
        description="Decode every segment byte the broker has committed since the last run into the Delta "
                    "tables `messages` (partitioned by topic, partition) and `quarantine` (undecodable records "
                    "with their raw bytes and reason), then stop. Re-running adds nothing; bytes appended "
                    "since are picked up. Progress is kept in <lake>/_checkpoints/ingest-<source>. RocketMQ "
                    "stores with config/consumerOffset.json also fill `consumer_offsets`.",
    )
    ing.add_argument("--source", metavar="NAME", help="which entry of `sources:` to ingest (default: all, in order)")
    _progress_options(ing)

    st = sub.add_parser(
        "stream", parents=[common], help="follow a source continuously (or once, with --available-now)",
        description="Tail the broker's segment folders with Structured Streaming: every --interval, decode the "
                    "bytes committed since the last micro-batch into `messages` and `quarantine`, exactly once "
                    "(checkpoint in <lake>/_checkpoints/ingest-<source>, shared with `msglake ingest`). "
                    "SIGINT/SIGTERM stop it gracefully: the running micro-batch may finish (--stop-timeout), "
                    "then the query stops; the checkpoint stays valid and a restart continues where it ended.",
    )
    st.add_argument("--source", metavar="NAME",
                    help="which entry of `sources:` to follow (required when there are several)")
    st.add_argument("--interval", default=os.environ.get("MSGLAKE_INTERVAL", "5 seconds"),
                    help="processing-time trigger, e.g. '1 second' or '1 minute' (env MSGLAKE_INTERVAL; "
                         "default '5 seconds')")
    st.add_argument("--available-now", action="store_true",
                    help="process what is committed now, in bounded micro-batches, then stop (the scheduled "
                         "batch job; same as `msglake ingest`)")
    st.add_argument("--stop-timeout", type=float, default=float(os.environ.get("MSGLAKE_STOP_TIMEOUT", 60)),
                    help="seconds a running micro-batch may take to finish after SIGINT/SIGTERM before it is "
                         "abandoned (it is then replayed on restart; env MSGLAKE_STOP_TIMEOUT; default 60)")
    _progress_options(st)

    demo = sub.add_parser(
        "demo", parents=[common], help="generate sample NSQ and RocketMQ data, ingest both, and show the tables",
        description="End to end on the embedded default: writes sample nsqd segments to demo-data/nsq and a "
                    "sample RocketMQ store to demo-data/rocketmq (bad records among them), ingests both with "
                    "local Spark into the same tables in ./lake, and prints rows per broker and topic, sample "
                    "rows through Spark SQL, the state of every message as of the newest one (msglake replay with "
                    "the settings' policies) and where the tables are. Run it again to see that a re-run adds "
                    "nothing.",
    )
    demo.add_argument("--messages", type=int, default=DEMO_MESSAGES, help=f"sample messages (default {DEMO_MESSAGES:,})")
    demo.add_argument("--fresh", action="store_true", help="delete the demo data and lake first")

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

    rp = sub.add_parser(
        "replay", parents=[common], help="states, dead letters and state changes of every message as of a time T",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Apply the brokers' delivery rules (shared/specs/semantics.md) as of time T: for every
message, when it became deliverable, whether it expired, was consumed, dead-lettered (with an
x-death history, through chains of dead-letter topics) or dropped, and its state at T.

inputs (each from the lake unless a file is given):
  messages         the `messages` table, or --messages: JSON lines in the unified schema
                   (shared/specs/message-schema.md; topic, messageId, storeTimestamp required,
                   times ISO-8601; producer retries (retryOf) and system copies are left out)
  policies         `policies:` of the settings, or --policies: a YAML mapping of topic pattern
                   -> {messageTtlMs, deadLetterTopic, deadLetterRoutingKey, deadLetterExchange,
                   maxLength, maxLengthBytes, overflow, maxDeliveries, maxPriority, maxDelayMs,
                   expiryAtHeadOnly}
  consumer events  the `consumer_events` table (`msglake load-events`), or --events: JSON lines
                   {"topic", "messageId" (uniqueId when the message has one, else messageId),
                   "group" (optional), "event": delivered|acked|rejected|requeued,
                   "time": ISO-8601 with zone}
  consumer offsets the `consumer_offsets` table (RocketMQ), unless --no-offsets

outputs: the Delta tables message_states, dead_letters and message_events (this T's rows
replaced, other T's kept), or with --json-out DIR the files message_states.jsonl,
dead_letters.jsonl and message_events.jsonl, sorted: the same inputs and T give the same bytes.""",
    )
    rp.add_argument("--as-of", metavar="T",
                    help="evaluation time, ISO-8601 (UTC when no zone) or epoch ms (default: the newest "
                         "storeTimestamp of the input)")
    rp.add_argument("--messages", metavar="PATH", help="JSON-lines file (or folder of *.json*) instead of the table")
    rp.add_argument("--policies", metavar="FILE", help="policies YAML instead of the settings' policies")
    rp.add_argument("--events", metavar="FILE", action="append",
                    help="consumer events JSON lines instead of the table (repeatable)")
    rp.add_argument("--no-offsets", action="store_true", help="ignore the consumer_offsets table")
    rp.add_argument("--json-out", metavar="DIR", help="write JSON lines to DIR instead of the Delta tables")
    rp.add_argument("--max-hops", type=int, default=16,
                    help="dead-letter hops one message may make before it is dropped (reason hop_limit; "
                         "default 16)")

    se = sub.add_parser(
        "semantics", parents=[common], help="follow the messages table and log state changes as event time passes",
        description="A streaming job over the `messages` table: the event-time watermark (newest storeTimestamp "
                    "minus --lateness) fires transformWithState timers (RocksDB state) that release scheduled "
                    "messages at deliverAt and expire the rest at expireAt, dead-lettering them through the "
                    "topic policies (chains, cycles, hop bound). Appends to `message_events` and `dead_letters` "
                    "(asOf null), exactly once; checkpoint <lake>/_checkpoints/semantics. Consumption, "
                    "rejections, overflow and RocketMQ retry chains are only known to `msglake replay`.",
    )
    se.add_argument("--available-now", action="store_true", help="catch up with the table, then stop")
    se.add_argument("--interval", default="5 seconds", help="processing-time trigger (default '5 seconds')")
    se.add_argument("--lateness", type=int, default=60,
                    help="seconds a message may arrive after newer ones and still be on time (default 60)")
    se.add_argument("--max-hops", type=int, default=16, help="dead-letter hops before a copy is dropped (default 16)")
    se.add_argument("--stop-timeout", type=float, default=60.0,
                    help="seconds a running micro-batch may take to finish after SIGINT/SIGTERM (default 60)")

    table_opt = argparse.ArgumentParser(add_help=False)
    table_opt.add_argument("--table", action="append", metavar="NAME",
                           help="only this table (repeatable; default: every table of the lake)")
    sub.add_parser(
        "optimize", parents=[common, table_opt], help="compact the tables' small files; Z-order messages by traceId",
        description="OPTIMIZE each Delta table of the lake: many small files from frequent micro-batches become "
                    "few large ones; `messages` is also Z-ordered by traceId inside each topic/partition, so a "
                    "trace lookup reads a few files. (Z-ORDER rather than liquid clustering: liquid clustering "
                    "cannot be combined with the topic/partition partitioning.) Prints what each table did.",
    )
    va = sub.add_parser(
        "vacuum", parents=[common, table_opt], help="delete files the tables no longer reference",
        description="VACUUM each Delta table: delete data files that no table version newer than --retain-hours "
                    "needs. Values below 168 (7 days) are refused unless --force: a running stream, a lagging "
                    "reader or time travel may still need those files.",
    )
    va.add_argument("--retain-hours", type=int, required=True, metavar="N", help="keep files needed by the last N hours")
    va.add_argument("--force", action="store_true", help="allow --retain-hours below 168")
    va.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    rt = sub.add_parser(
        "retention", parents=[common, table_opt], help="delete rows older than N days",
        description="Delete rows older than --days before --as-of (default: now) from messages (storeTimestamp), "
                    "quarantine (quarantinedAt), consumer_offsets (snapshotTime) and consumer_events (time). Files "
                    "holding only old rows leave the table at once; `msglake vacuum` then frees the disk. Replay "
                    "outputs are kept.",
    )
    rt.add_argument("--days", type=float, required=True, metavar="N", help="keep the last N days")
    rt.add_argument("--as-of", metavar="T", help="reference time, ISO-8601 or epoch ms (default: now)")
    rt.add_argument("--dry-run", action="store_true", help="only count what would be deleted")

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

    le = sub.add_parser(
        "load-events", parents=[common], help="append consumer events (JSON lines) to the consumer_events table",
        description="Read consumer events, one JSON object per line: {\"topic\": ..., \"messageId\": ..., "
                    "\"group\": ..., \"event\": \"delivered|acked|rejected|requeued\", \"time\": "
                    "\"2026-11-01T10:00:00.250Z\"}, and add them to the Delta table consumer_events (an event "
                    "already there is not added twice). Lines that do not fit are listed with their line "
                    "number and reason, and the exit status is 1.",
    )
    le.add_argument("files", nargs="+", metavar="FILE")

    pkg = sub.add_parser(
        "package", parents=[common], help="build the code zip for a cluster and print a spark-submit line",
        description="Write msglake's Python packages as one zip for --py-files (named by a digest of the code) "
                    "and print it with the Delta jars and a spark-submit command that runs `msglake ingest` on a "
                    "cluster. `msglake ingest --master spark://...` does the same shipping by itself.",
    )
    pkg.add_argument("--out", metavar="DIR", default=os.environ.get("MSGLAKE_DIST_DIR", "dist"),
                     help="folder for the zip (env MSGLAKE_DIST_DIR; default ./dist)")

    gen = sub.add_parser(
        "generate", help="write sample broker data (real on-disk layout) with known contents",
        description="Write sample NSQ extended-message segments and meta files, as nsqd lays them out, or a "
                    "RocketMQ store (commitlog/, consumequeue/, config/consumerOffset.json) as a broker does.",
    )
    gen.add_argument("out", help="folder to write (the nsqd --data-path, or the RocketMQ store root)")
    gen.add_argument("--format", choices=("nsq-ext", "rocketmq-commitlog"), default="nsq-ext",
                     help="which broker's layout (default nsq-ext)")
    gen.add_argument("--messages", type=int, default=10_000, help="good messages to write (default 10,000)")
    gen.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    gen.add_argument("--segment-bytes", type=int, default=4 << 20,
                     help="roll to a new segment file past this size; for RocketMQ, the fixed CommitLog file "
                          "size (default 4 MiB)")
    gen.add_argument("--no-bad-inputs", action="store_true", help="leave out the corrupt records and files")
    return p


def _progress_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics-file", metavar="FILE", default=os.environ.get("MSGLAKE_METRICS_FILE"),
                   help="append one JSON object per micro-batch (messages/s, bytes/s, backlog per "
                        "topic/partition, quarantined) to FILE (env MSGLAKE_METRICS_FILE)")
    p.add_argument("--quiet", action="store_true", help="no per-batch progress line on stderr")


def _load_settings(args) -> settings_mod.Settings:
    env = dict(os.environ)
    if args.lake:
        env["MSGLAKE_LAKE_ROOT"] = args.lake
    if args.master:
        env["MSGLAKE_SPARK_MASTER"] = args.master
    return settings_mod.load(args.conf, env=env)


def _print(lines) -> None:
    for line in lines:
        print(line, flush=True)


def cmd_ingest(args) -> int:
    args.available_now, args.interval, args.stop_timeout = True, None, 60.0
    if args.source is not None:
        return cmd_stream(args)
    worst = 0
    for src in _load_settings(args).sources:
        args.source = src.name
        worst = max(worst, cmd_stream(args))
    return worst


def cmd_stream(args) -> int:
    import signal
    import threading

    from pipelines.ingest import run
    from pipelines.progress import ProgressReporter
    from pipelines.session import build_session

    settings = _load_settings(args)
    settings.source(args.source)  # fail on a bad name before Spark starts
    stop = threading.Event()

    def request_stop(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt  # a second signal: stop now
        print(f"\nmsglake: {signal.Signals(signum).name} received, stopping after the running micro-batch "
              f"(at most {args.stop_timeout:.0f}s)", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    reporter = ProgressReporter(metrics_path=args.metrics_file, live=None if args.quiet else sys.stderr)
    spark = build_session(settings)
    summary = run(spark, settings, args.source, available_now=args.available_now, interval=args.interval,
                  stop=stop, stop_timeout=args.stop_timeout, progress=reporter)
    reporter.close()
    _print(summary.lines())
    _print(f"  table {name}: {path}" for name, path in summary.tables.items())
    return 0 if summary.balanced else 1


def _generate(fmt: str, out: str, messages: int, seed: int = 7, segment_bytes: int = 4 << 20,
              bad_inputs: bool = True):
    if fmt == "rocketmq-commitlog":
        from formats.rocketmq_samples import generate

        return generate(out, messages, seed=seed, file_size=segment_bytes, bad_inputs=bad_inputs)
    from formats.nsq_samples import generate

    return generate(out, messages, seed=seed, max_bytes_per_file=segment_bytes, bad_inputs=bad_inputs)


def cmd_sql(args) -> int:
    from pyspark.errors import PySparkException

    from pipelines.session import build_session
    from pipelines.sql import WriteRefused, render, run_sql

    settings = _load_settings(args)
    spark = build_session(settings)
    try:
        df = run_sql(spark, args.query, allow_writes=args.allow_writes)
        sys.stdout.write(render(df, args.format, args.limit))
    except WriteRefused as e:
        print(f"msglake: refused: {e}", file=sys.stderr)
        return 2
    except PySparkException as e:
        print(f"msglake: SQL error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


def cmd_replay(args) -> int:
    from pipelines import replay as R
    from pipelines.session import build_session
    from transforms.lifecycle import evaluate

    settings = _load_settings(args)
    as_of = R.parse_time(args.as_of) if args.as_of else None
    if args.max_hops < 0:
        raise settings_mod.SettingsError("--max-hops: must be 0 or more")
    policies = R.load_policies(args.policies) if args.policies else R.policies_of(settings)
    started = time.monotonic()
    spark = build_session(settings)
    rejected = []
    if args.messages:
        loaded = R.read_messages_json(spark, args.messages)
        messages, rejected = loaded.df, loaded.rejected
    else:
        messages = _table(spark, settings, "messages", required=True)
    if args.events:
        loaded = R.read_consumer_events(spark, args.events)
        events, rejected = loaded.df, rejected + loaded.rejected
    else:
        events = _table(spark, settings, "consumer_events")
    offsets = None if args.no_offsets or args.messages else _table(spark, settings, "consumer_offsets")
    as_of = as_of or R.default_as_of(messages)
    result = evaluate(messages, policies, as_of, consumer_events=events, consumer_offsets=offsets,
                        max_hops=args.max_hops)
    out = R.write_json(result, args.json_out) if args.json_out else R.write_tables(spark, settings, result)
    _print(R.summarize(result))
    for r in rejected:
        print(f"  input line not used: {r.file}:{r.line}: {r.reason}")
    _print(f"  {name:<15} {path}" for name, path in out.items())
    print(f"replay took {time.monotonic() - started:.1f}s")
    return 1 if rejected else 0


def _table(spark, settings, name: str, required: bool = False):
    path = settings.lake.table_path(name)
    if os.path.isdir(os.path.join(path, "_delta_log")):
        return spark.read.format("delta").load(path)
    if required:
        raise FileNotFoundError(f"no {name} table in {path}: run `msglake ingest` first, or give --{name} FILE")
    return None


def cmd_semantics(args) -> int:
    import signal
    import threading

    from pipelines.semantics_stream import run
    from pipelines.session import build_session

    settings = _load_settings(args)
    if args.lateness < 0 or args.max_hops < 0:
        raise settings_mod.SettingsError("--lateness and --max-hops: must be 0 or more")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    spark = build_session(settings)
    summary = run(spark, settings, available_now=args.available_now, interval=args.interval,
                  lateness_seconds=args.lateness, max_hops=args.max_hops, stop=stop, stop_timeout=args.stop_timeout)
    _print(summary.lines())
    _print(f"  table {name}: {path}" for name, path in summary.tables.items())
    return 0


def cmd_maintenance(args) -> int:
    import datetime as dt

    from pipelines import maintenance as M
    from pipelines.replay import parse_time
    from pipelines.session import build_session

    settings = _load_settings(args)
    if args.command == "retention":
        now = parse_time(args.as_of) if args.as_of else dt.datetime.now(dt.timezone.utc)
    spark = build_session(settings)
    started = time.monotonic()
    if args.command == "optimize":
        done = M.optimize(spark, settings, args.table)
    elif args.command == "vacuum":
        done = M.vacuum(spark, settings, args.retain_hours, args.force, args.table, args.dry_run)
    else:
        done = M.retention(spark, settings, args.days, now, args.table, args.dry_run)
    print(f"{args.command} of {settings.lake.root}: {len(done)} table(s) in {time.monotonic() - started:.1f}s")
    _print(d.line() for d in done)
    return 0


def cmd_quality(args) -> int:
    from pipelines.replay import parse_time
    from pipelines.report import run_quality
    from pipelines.session import build_session

    settings = _load_settings(args)
    since = parse_time(args.since, "--since") if args.since else None
    spark = build_session(settings)
    worst = 0
    for table in args.table or ["messages"]:
        started = time.monotonic()
        run = run_quality(spark, settings, table, since, args.out)
        _print(run.lines())
        print(f"  took {time.monotonic() - started:.1f}s")
        worst = max(worst, 1 if run.errors else 0)
    return worst


def cmd_load_events(args) -> int:
    from pipelines.replay import load_events_table
    from pipelines.session import build_session

    settings = _load_settings(args)
    spark = build_session(settings)
    loaded, added = load_events_table(spark, settings, args.files)
    print(f"read {loaded.rows:,} consumer events; added {added:,} new to {settings.lake.table_path('consumer_events')}")
    for r in loaded.rejected:
        print(f"  line not loaded: {r.file}:{r.line}: {r.reason}")
    return 1 if loaded.rejected else 0


def cmd_package(args) -> int:
    from pipelines.package import build_pyfiles
    from pipelines.session import delta_jars

    settings = _load_settings(args)
    zip_path = build_pyfiles(os.path.abspath(args.out))
    jars = delta_jars(settings)
    submit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "submit.py")
    print(f"code:  {zip_path}")
    print(f"jars:  {len(jars)} files in {os.path.dirname(jars[0])}")
    print("run on a cluster (the conf, segments, lake and checkpoints on storage every node sees):")
    print(f"  spark-submit --master {args.master or 'spark://HOST:7077'} --py-files {zip_path} \\\n"
          f"    --jars {','.join(jars)} \\\n    {submit} ingest --conf /shared/msglake.yaml")
    return 0


def cmd_generate(args) -> int:
    started = time.monotonic()
    truth = _generate(args.format, args.out, args.messages, args.seed, args.segment_bytes, not args.no_bad_inputs)
    retries = sum(1 for m in truth.messages if m.retry_of)
    print(f"wrote {len(truth.messages) - retries:,} messages (+{retries} producer retries) and "
          f"{len(truth.quarantined)} corrupt records to {os.path.abspath(args.out)} in {time.monotonic() - started:.1f}s")
    return 0


def cmd_demo(args) -> int:
    from pipelines.ingest import ingest
    from pipelines.session import build_session

    settings = _load_settings(args)
    if args.fresh:
        for src in settings.sources:
            shutil.rmtree(src.path, ignore_errors=True)
        shutil.rmtree(settings.lake.root, ignore_errors=True)
    for src in settings.sources:
        if not os.path.isdir(src.path):
            print(f"[1/5] generating {args.messages:,} sample messages ({src.format}) in {os.path.abspath(src.path)}",
                  flush=True)
            truth = _generate(src.format, src.path, args.messages)
            print(f"      {len(truth.messages):,} messages, {len(truth.quarantined)} corrupt records among them",
                  flush=True)
        else:
            print(f"[1/5] using the sample data already in {os.path.abspath(src.path)} (--fresh to regenerate)",
                  flush=True)
    print("[2/5] starting Spark and ingesting (available-now) ...", flush=True)
    spark = build_session(settings)
    tables: dict[str, str] = {}
    balanced = True
    for src in settings.sources:
        summary = ingest(spark, settings, src.name)
        _print(summary.lines())
        tables.update(summary.tables)
        balanced &= summary.balanced
    print("[3/5] delivery semantics (msglake replay) as of the newest message, with the settings' policies",
          flush=True)
    from pipelines import replay as R
    from transforms.lifecycle import evaluate

    messages = spark.read.format("delta").load(settings.lake.table_path("messages"))
    offsets = _table(spark, settings, "consumer_offsets")
    result = evaluate(messages, R.policies_of(settings), R.default_as_of(messages), consumer_offsets=offsets)
    tables.update(R.write_tables(spark, settings, result))
    _print(R.summarize(result))
    print("[4/5] what the lake holds, through Spark SQL", flush=True)
    for title, sql in (
        ("rows per broker and topic (one table for every broker)",
         "SELECT sourceFormat, topic, count(DISTINCT partition) AS partitions, count(*) AS messages, "
         "sum(CAST(systemCopy AS INT)) AS system_copies, count(retryOf) AS producer_retries "
         "FROM messages GROUP BY sourceFormat, topic ORDER BY sourceFormat, topic"),
        ("a few messages of topic orders from each broker",
         "SELECT sourceFormat, partition, queueOffset, messageId, tags, messageType, delayTime, storeTimestamp, "
         "bodySize, CASE WHEN is_valid_utf8(cast(body AS STRING)) THEN substr(cast(body AS STRING), 1, 20) "
         "ELSE concat('0x', hex(substr(body, 1, 8)), '...') END AS body FROM (SELECT *, row_number() OVER "
         "(PARTITION BY sourceFormat ORDER BY partition, queueOffset) AS n FROM messages "
         "WHERE topic = 'orders' AND tags IS NOT NULL) WHERE n <= 4 ORDER BY sourceFormat, n"),
        ("quarantine by reason",
         "SELECT sourceFormat, substr(reason, 1, 60) AS reason, count(*) AS records, sum(recordLength) AS bytes "
         "FROM quarantine GROUP BY 1, 2 ORDER BY 1, 3 DESC"),
        ("a RocketMQ message's x-death history (retried by its consumer group, then dead-lettered)",
         "SELECT topic, hop, state, stateReason, transform(deathHistory, d -> concat(d.queue, ' ', d.reason, ' x', "
         "d.count)) AS history FROM message_states WHERE uniqueId = (SELECT min(uniqueId) FROM message_states "
         "WHERE startswith(topic, '%DLQ%')) ORDER BY hop"),
        ("RocketMQ consumer lag (latest consumer_offsets snapshot)",
         "SELECT `group`, topic, queue, offset, queueMaxOffset, queueMaxOffset - offset AS lag FROM consumer_offsets "
         "WHERE snapshotTime = (SELECT max(snapshotTime) FROM consumer_offsets) ORDER BY topic, queue"),
    ):
        if any(t in sql and t not in tables for t in ("consumer_offsets", "message_states")):
            continue
        print(f"\n-- {title}: {sql}", flush=True)
        spark.sql(sql).show(50, truncate=False)
    print("[5/5] data-quality report on messages (msglake quality)", flush=True)
    from pipelines.report import run_quality

    quality = run_quality(spark, settings, "messages")
    _print(quality.lines()[:1] + [line for line in quality.lines()[1:] if not line.startswith("  ok")])
    print("\ntables (Delta, query with spark.sql after pipelines.session.build_session):")
    _print(f"  {name:<16} {path}" for name, path in tables.items())
    print(f"\nquality report (open in a browser, works offline): {quality.html_path}")
    sample = ("SELECT topic, sum(copies) AS copies, sum(ready) AS ready, sum(expired) AS expired, "
              "sum(deadLettered) AS dead_lettered FROM v_backlog WHERE asOf = (SELECT max(asOf) FROM v_backlog) "
              "GROUP BY topic ORDER BY copies DESC")
    print(f"sample query (views: v_messages, v_trace, v_dead_letters, v_backlog):\n  msglake sql \"{sample}\"")
    spark.sql(sample).show(truncate=False)
    return 0 if balanced and not quality.errors else 1


def main(argv: list[str] | None = None) -> int:
    from pipelines.replay import ReplayInputError
    from pipelines.session import MissingJarsError
    from quality.rules import QualityRuleFailed

    args = _parser().parse_args(argv)
    handlers = {"ingest": cmd_ingest, "stream": cmd_stream, "demo": cmd_demo, "generate": cmd_generate,
                "package": cmd_package, "sql": cmd_sql, "replay": cmd_replay, "load-events": cmd_load_events,
                "semantics": cmd_semantics, "optimize": cmd_maintenance, "vacuum": cmd_maintenance,
                "retention": cmd_maintenance, "quality": cmd_quality}
    try:
        return handlers[args.command](args)
    except (settings_mod.SettingsError, MissingJarsError, FileNotFoundError, ReplayInputError) as e:
        print(f"msglake: error: {e}", file=sys.stderr)
        return 2
    except QualityRuleFailed as e:
        print(f"msglake: quality check failed: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("msglake: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
