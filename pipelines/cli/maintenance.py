"""``msglake optimize``, ``vacuum`` and ``retention``: keeping the lake's tables fast and bounded."""
from __future__ import annotations

import argparse
import time

from msglake.pipelines.cli.common import emit, load_settings, parse_time


def register(sub, common) -> None:
    table_opt = argparse.ArgumentParser(add_help=False)
    table_opt.add_argument("--table", action="append", metavar="NAME",
                           help="only this table (repeatable; default: every table of the lake)")
    op = sub.add_parser(
        "optimize", parents=[common, table_opt], help="compact the tables' small files; Z-order messages by traceId",
        description="OPTIMIZE each Delta table of the lake: many small files from frequent micro-batches become "
                    "few large ones; `messages` is also Z-ordered by traceId inside each topic/partition, so a "
                    "trace lookup reads a few files. (Z-ORDER rather than liquid clustering: liquid clustering "
                    "cannot be combined with the topic/partition partitioning.) Prints what each table did.",
    )
    op.set_defaults(handler=maintain)
    va = sub.add_parser(
        "vacuum", parents=[common, table_opt], help="delete files the tables no longer reference",
        description="VACUUM each Delta table: delete data files that no table version newer than --retain-hours "
                    "needs. Values below 168 (7 days) are refused unless --force: a running stream, a lagging "
                    "reader or time travel may still need those files.",
    )
    va.add_argument("--retain-hours", type=int, required=True, metavar="N", help="keep files needed by the last N hours")
    va.add_argument("--force", action="store_true", help="allow --retain-hours below 168")
    va.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    va.set_defaults(handler=maintain)
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
    rt.set_defaults(handler=maintain)


def maintain(args) -> int:
    import datetime as dt

    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs import maintenance as M
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    if args.command == "retention":
        now = parse_time(args.as_of, "--as-of") if args.as_of else dt.datetime.now(dt.timezone.utc)
    check_lake_root(settings.lake.root, write=not getattr(args, "dry_run", False))
    spark = build_session(settings, segments=False)
    started = time.monotonic()
    if args.command == "optimize":
        done = M.optimize(spark, settings, args.table)
    elif args.command == "vacuum":
        done = M.vacuum(spark, settings, args.retain_hours, args.force, args.table, args.dry_run)
    else:
        done = M.retention(spark, settings, args.days, now, args.table, args.dry_run)
    print(f"{args.command} of {settings.lake.root}: {len(done)} table(s) in {time.monotonic() - started:.1f}s")
    emit(d.line() for d in done)
    return 0
