"""``msglake ingest`` and ``msglake stream``: segments into the lake, once or continuously."""
from __future__ import annotations

import os
import signal
import sys
import threading

from msglake.pipelines.cli.common import emit, load_settings


def register(sub, common) -> None:
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
    ing.set_defaults(handler=ingest)

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
    add_stop_timeout(st)
    _progress_options(st)
    st.set_defaults(handler=stream)


def add_stop_timeout(p) -> None:
    p.add_argument("--stop-timeout", type=float, default=float(os.environ.get("MSGLAKE_STOP_TIMEOUT", 60)),
                   help="seconds a running micro-batch may take to finish after SIGINT/SIGTERM before it is "
                        "abandoned (it is then replayed on restart; env MSGLAKE_STOP_TIMEOUT; default 60)")


def _progress_options(p) -> None:
    p.add_argument("--metrics-file", metavar="FILE", default=os.environ.get("MSGLAKE_METRICS_FILE"),
                   help="append one JSON object per micro-batch (messages/s, bytes/s, backlog per "
                        "topic/partition, quarantined) to FILE (env MSGLAKE_METRICS_FILE)")
    p.add_argument("--quiet", action="store_true", help="no per-batch progress line on stderr")


def stop_on_signals(stop_timeout: float) -> threading.Event:
    """An event set by the first SIGINT/SIGTERM; a second one stops at once."""
    stop = threading.Event()

    def request_stop(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        print(f"\nmsglake: {signal.Signals(signum).name} received, stopping after the running micro-batch "
              f"(at most {stop_timeout:.0f}s)", file=sys.stderr, flush=True)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop


def ingest(args) -> int:
    settings = load_settings(args)
    names = [args.source] if args.source is not None else [s.name for s in settings.sources]
    worst = 0
    for name in names:
        worst = max(worst, _run(args, settings, name, available_now=True, interval=None, stop_timeout=60.0))
    return worst


def stream(args) -> int:
    settings = load_settings(args)
    return _run(args, settings, args.source, available_now=args.available_now, interval=args.interval,
                stop_timeout=args.stop_timeout)


def _run(args, settings, source, available_now: bool, interval, stop_timeout: float) -> int:
    from msglake.pipelines.io.paths import check_lake_root, check_source_folder
    from msglake.pipelines.io.progress import ProgressReporter
    from msglake.pipelines.jobs.ingest import run
    from msglake.pipelines.session import build_session

    src = settings.source(source)  # a bad name, a missing or unreadable folder fail before Spark starts
    check_source_folder(src.name, src.path)
    check_lake_root(settings.lake.root, write=True)
    stop = stop_on_signals(stop_timeout)
    reporter = ProgressReporter(metrics_path=args.metrics_file, live=None if args.quiet else sys.stderr)
    spark = build_session(settings)
    summary = run(spark, settings, src.name, available_now=available_now, interval=interval or "5 seconds",
                  stop=stop, stop_timeout=stop_timeout, progress=reporter)
    reporter.close()
    emit(summary.lines())
    emit(f"  table {name}: {path}" for name, path in summary.tables.items())
    return 0 if summary.balanced else 1
