"""``msglake replay``, ``msglake semantics`` and ``msglake load-events``: the brokers' delivery rules."""
from __future__ import annotations

import argparse

from msglake.pipelines.cli.common import emit, load_settings, non_negative, parse_time, served
from msglake.pipelines.cli.ingest import add_stop_timeout, stop_on_signals

REPLAY_HELP = """Apply the brokers' delivery rules (docs/semantics.md) as of time T: for every
message, when it became deliverable, whether it expired, was consumed, dead-lettered (with an
x-death history, through chains of dead-letter topics) or dropped, and its state at T.

inputs (each from the lake unless a file is given):
  messages         the `messages` table, or --messages: JSON lines in the unified schema
                   (docs/message-schema.md; topic, messageId, storeTimestamp required,
                   times ISO-8601; producer retries (retryOf) and system copies are left out)
  policies         `policies:` of the settings, or --policies: a YAML mapping of topic pattern
                   -> {messageTtlMs, deadLetterTopic, deadLetterRoutingKey, deadLetterExchange,
                   maxLength, maxLengthBytes, overflow, maxDeliveries, maxPriority, maxDelayMs,
                   expiryAtHeadOnly}
  consumer events  the `consumer_events` table (`msglake load-events`), or --events: JSON lines
                   {"topic", "messageId" (any id the consumer saw: RocketMQ UNIQ_KEY or offset
                   msgId, NSQ id), "partition" (optional: needed where the id alone names several
                   messages, as NSQ ids do across partitions), "group" (optional),
                   "event": delivered|acked|rejected|requeued, "time": ISO-8601 with zone};
                   an event whose id fits several messages is refused with its line
  consumer offsets the `consumer_offsets` table (RocketMQ), unless --no-offsets

outputs: the Delta tables message_states, dead_letters and message_events (this T's rows
replaced, other T's kept), or with --json-out DIR the files message_states.jsonl,
dead_letters.jsonl and message_events.jsonl, sorted: the same inputs and T give the same bytes."""


def register(sub, common) -> None:
    rp = sub.add_parser("replay", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
                        help="states, dead letters and state changes of every message as of a time T",
                        description=REPLAY_HELP)
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
    rp.set_defaults(handler=replay)

    se = sub.add_parser(
        "semantics", parents=[common], help="follow the messages table and log state changes as event time passes",
        description="A streaming job over the `messages` table, an incremental `msglake replay`: each "
                    "micro-batch moves the watermark (newest storeTimestamp minus --lateness) and evaluates the "
                    "new messages and the pending copies that may change by then (due, named by a consumer event "
                    "or offset snapshot, chained with a new RocketMQ retry record, or in a topic with overflow "
                    "or head-only expiry) with the replay's rules, including consumption, rejections, delivery "
                    "limits and overflow. Appends the state changes since the last watermark to "
                    "`message_events` and new dead-letter copies to `dead_letters` (asOf null), exactly once; "
                    "checkpoint <lake>/_checkpoints/semantics, pending copies in "
                    "<lake>/_checkpoints/semantics-pending and semantics-dormant (delete all three to start "
                    "over).",
    )
    se.add_argument("--available-now", action="store_true", help="catch up with the table, then stop")
    se.add_argument("--interval", default="5 seconds", help="processing-time trigger (default '5 seconds')")
    se.add_argument("--lateness", type=int, default=60,
                    help="seconds a message or consumer event may arrive after newer messages and still be on "
                         "time (default 60)")
    se.add_argument("--max-hops", type=int, default=16, help="dead-letter hops before a copy is dropped (default 16)")
    add_stop_timeout(se)
    se.set_defaults(handler=semantics)

    hi = sub.add_parser(
        "history", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="one message's story across topics: copies, state changes, x-death history",
        description="""Tell what happened to one message by time T: every record the broker stored of it
(RocketMQ %RETRY%/%DLQ% records included), every dead-letter copy the delivery rules made,
each copy's state changes with times and reasons, and its x-death history. ID is a
messageId, uniqueId (RocketMQ UNIQ_KEY, the producer's own included) or traceId. Only the
message's own records are evaluated (found through the table's file statistics; run
`msglake optimize` for fewer files to read), unless its story reaches a topic with overflow
limits or head-only expiry: that topic, and those that dead-letter into it, are evaluated
whole, and the answer says so. The same rules as `msglake replay --as-of T`, the same result.
An NSQ id recurs in every partition of a topic: each message it names is told apart, or
narrow with --topic/--partition. When `msglake serve` runs for the same lake, the lookup runs
in its warm session (with this command's policies), which saves the Spark start and warm-up.""")
    hi.add_argument("id", metavar="ID", help="messageId, uniqueId or traceId")
    hi.add_argument("--as-of", metavar="T", help="evaluation time, ISO-8601 (UTC when no zone) or epoch ms "
                                                 "(default: the newest storeTimestamp of the lake)")
    hi.add_argument("--topic", help="only the records stored in this topic")
    hi.add_argument("--partition", type=int, help="only the records stored in this partition")
    hi.add_argument("--format", choices=("text", "json"), default="text", help="output (default text)")
    hi.add_argument("--max-hops", type=int, default=16, help="dead-letter hops before a copy is dropped (default 16)")
    hi.add_argument("--in-process", action="store_true", help="do not use a running `msglake serve`")
    hi.set_defaults(handler=history)

    le = sub.add_parser(
        "load-events", parents=[common], help="append consumer events (JSON lines) to the consumer_events table",
        description="Read consumer events, one JSON object per line: {\"topic\": ..., \"messageId\": ..., "
                    "\"partition\": ... (optional), \"group\": ... (optional), \"event\": "
                    "\"delivered|acked|rejected|requeued\", \"time\": \"2026-11-01T10:00:00.250Z\"}, resolve "
                    "each to the message it names in the lake's messages table, and add them to the Delta table "
                    "consumer_events (an event already there is not added twice). Lines that do not fit, and "
                    "events whose id names more than one message (an NSQ id without its partition, a RocketMQ "
                    "batch's shared UNIQ_KEY), are listed with their line number and reason, and the exit "
                    "status is 1.",
    )
    le.add_argument("files", nargs="+", metavar="FILE")
    le.set_defaults(handler=load_events)


def replay(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.replay import run_replay, small_input
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    as_of = parse_time(args.as_of, "--as-of") if args.as_of else None
    non_negative(args.max_hops, "--max-hops")
    if not args.json_out:
        check_lake_root(settings.lake.root, write=True)
    small = small_input(None, settings, args.messages, args.events, not args.no_offsets)
    spark = build_session(settings, segments=False, small=small)
    run = run_replay(spark, settings, as_of=as_of, messages=args.messages, policies=args.policies,
                     events=args.events, use_offsets=not args.no_offsets, json_out=args.json_out,
                     max_hops=args.max_hops)
    emit(run.lines())
    return 1 if run.rejected else 0


def semantics(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.semantics import run
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    non_negative(args.lateness, "--lateness")
    non_negative(args.max_hops, "--max-hops")
    check_lake_root(settings.lake.root, write=True)
    stop = stop_on_signals(args.stop_timeout)
    spark = build_session(settings, segments=False)
    summary = run(spark, settings, available_now=args.available_now, interval=args.interval,
                  lateness_seconds=args.lateness, max_hops=args.max_hops, stop=stop, stop_timeout=args.stop_timeout)
    emit(summary.lines())
    emit(f"  table {name}: {path}" for name, path in summary.tables.items())
    return 0


def load_events(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.replay import load_events_table
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    check_lake_root(settings.lake.root, write=True)
    spark = build_session(settings, segments=False)
    loaded, added = load_events_table(spark, settings, args.files)
    print(f"read {loaded.rows:,} consumer events; added {added:,} new to {settings.lake.table_path('consumer_events')}")
    for r in loaded.rejected:
        print(f"  line not loaded: {r.file}:{r.line}: {r.reason}")
    return 1 if loaded.rejected else 0


def history(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root

    settings = load_settings(args)
    as_of = parse_time(args.as_of, "--as-of") if args.as_of else None
    non_negative(args.max_hops, "--max-hops")
    if args.partition is not None:
        non_negative(args.partition, "--partition")
    check_lake_root(settings.lake.root, write=False)
    from msglake.pipelines.jobs.serve import HISTORY_ACTION, MAX_HOPS_SERVED, ask_server, find_server
    from msglake.pipelines.settings import policy_dicts

    if not args.in_process and args.max_hops <= MAX_HOPS_SERVED:
        uri = find_server(settings)
        request = {"id": args.id, "asOf": as_of and as_of.isoformat(), "topic": args.topic,
                   "partition": args.partition, "maxHops": args.max_hops, "format": args.format,
                   "policies": policy_dicts(settings.policies)}
        reply = ask_server(uri, HISTORY_ACTION, request) if uri else None
        if reply is not None:
            return served(reply)
    from msglake.pipelines.jobs.history import history as story_of, render_json, render_text, small_lookup
    from msglake.pipelines.session import build_session

    # Known before the JVM starts: a lookup that cannot reach a topic evaluated whole gets a
    # small job's driver (C1 only, session.SMALL_JOB_JIT).
    spark = build_session(settings, segments=False, small=small_lookup(policy_dicts(settings.policies)))
    story = story_of(spark, settings, args.id, as_of=as_of, topic=args.topic, partition=args.partition,
                     max_hops=args.max_hops)
    emit(render_json(story) if args.format == "json" else render_text(story))
    return 0
