"""Table maintenance: compaction with Z-ordering, vacuum with a safety floor, retention by age.

Why Z-ORDER and not liquid clustering: the ``messages`` table is partitioned by topic and
partition (how it is queried and how retention and streaming append to it), and Delta's
liquid clustering cannot be combined with partition columns. Z-ordering by ``traceId``
within each partition keeps that layout and still lets a trace lookup skip the files whose
``traceId`` min/max cannot hold it (``traceId`` is in the table's statistics columns).
"""
from __future__ import annotations

import datetime as dt
from contextlib import nullcontext
from dataclasses import dataclass

from msglake.errors import ConfigError
from msglake.pipelines.io.catalog import delta_path
from msglake.pipelines.session import setting
from msglake.pipelines.settings import Settings
from msglake.schemas import LAKE_TABLES

#: Delta's own default retention (7 days): below it a concurrent or lagging reader, or a
#: streaming checkpoint, may need files VACUUM would delete.
SAFE_RETAIN_HOURS = 168
#: Z-order columns per table; the others are only compacted.
ZORDER = {"messages": ("traceId",)}
#: Largest file OPTIMIZE writes for a Z-ordered table. Delta's default (1 GiB) leaves one file per
#: topic/partition of a few GiB, and a file whose traceId range covers everything cannot be
#: skipped; smaller Z-ordered files each cover a narrow traceId range, so a lookup reads one per
#: partition.
ZORDER_FILE_BYTES = 128 << 20
#: The time column retention compares against, per table.
RETENTION_COLUMN = {"messages": "storeTimestamp", "quarantine": "quarantinedAt", "consumer_offsets": "snapshotTime",
                    "consumer_events": "time"}


@dataclass
class Done:
    table: str
    action: str
    detail: str

    def line(self) -> str:
        return f"  {self.table:<17} {self.action:<9} {self.detail}"


def _existing(spark, settings: Settings, names: list[str] | None) -> list[tuple[str, str]]:
    from delta.tables import DeltaTable

    known = [spec.name for spec in LAKE_TABLES]
    wanted = names or known
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ConfigError(f"unknown table(s) {unknown}; the lake's tables: {known}")
    out = []
    for name in wanted:
        path = settings.lake.table_path(name)
        if DeltaTable.isDeltaTable(spark, path):
            out.append((name, path))
    return out


def optimize(spark, settings: Settings, tables: list[str] | None = None) -> list[Done]:
    """OPTIMIZE every table (``messages`` Z-ordered by traceId); returns what each did."""
    done = []
    for name, path in _existing(spark, settings, tables):
        zorder = ZORDER.get(name)
        sql = f"OPTIMIZE {delta_path(path)}" + (f" ZORDER BY ({', '.join(zorder)})" if zorder else "")
        sized = (setting(spark, "spark.databricks.delta.optimize.maxFileSize", str(ZORDER_FILE_BYTES)) if zorder
                 else nullcontext())
        with sized:
            metrics = spark.sql(sql).first()["metrics"]
        how = f"Z-ordered by {', '.join(zorder)}" if zorder else "compacted"
        done.append(Done(name, "optimize", f"{how}: {metrics['numFilesRemoved']} files -> {metrics['numFilesAdded']} "
                                           f"({metrics['filesRemoved']['totalSize'] or 0:,} -> "
                                           f"{metrics['filesAdded']['totalSize'] or 0:,} bytes)"))
    return done


def vacuum(spark, settings: Settings, retain_hours: int, force: bool = False,
           tables: list[str] | None = None, dry_run: bool = False) -> list[Done]:
    """VACUUM files no version newer than ``retain_hours`` needs; below 168 h only with ``force``."""
    if retain_hours < 0:
        raise ConfigError("--retain-hours: must be 0 or more")
    if retain_hours < SAFE_RETAIN_HOURS and not force:
        raise ConfigError(
            f"--retain-hours {retain_hours} is below {SAFE_RETAIN_HOURS} (7 days): a running stream, a lagging "
            "reader or time travel may still need those files. Stop the jobs that read the lake and add --force "
            "to do it anyway.")
    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(key, "true")
    spark.conf.set(key, "false" if retain_hours < SAFE_RETAIN_HOURS else before)
    # VACUUM lists the table's files with this many tasks (Spark's default, 10,000, cost 50 s
    # for a 12-file table here); the cluster's cores are enough unless the settings say otherwise.
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    listing_before = spark.conf.get(listing)
    if listing not in settings.spark.conf:
        spark.conf.set(listing, str(max(2, 2 * spark.sparkContext.defaultParallelism)))
    done = []
    try:
        for name, path in _existing(spark, settings, tables):
            doomed = spark.sql(f"VACUUM {delta_path(path)} RETAIN {retain_hours} HOURS DRY RUN").count()
            if not dry_run and doomed:
                spark.sql(f"VACUUM {delta_path(path)} RETAIN {retain_hours} HOURS").collect()
            verb = "would delete" if dry_run else "deleted"
            done.append(Done(name, "vacuum", f"{verb} {doomed} unreferenced file(s) older than {retain_hours} h"))
    finally:
        spark.conf.set(key, before)
        spark.conf.set(listing, listing_before)
    return done


def retention(spark, settings: Settings, days: float, now: dt.datetime, tables: list[str] | None = None,
              dry_run: bool = False) -> list[Done]:
    """Delete rows older than ``days`` before ``now`` (files wholly older are dropped from the log;
    VACUUM then frees the disk). Replay outputs are kept (they are per evaluation time)."""
    if days <= 0:
        raise ConfigError("--days: must be more than 0")
    cutoff = now - dt.timedelta(days=days)
    stamp = cutoff.astimezone(dt.timezone.utc).isoformat()
    done = []
    for name, path in _existing(spark, settings, tables):
        column = RETENTION_COLUMN.get(name)
        if column is None:
            continue
        cond = f"`{column}` < TIMESTAMP '{stamp}'"
        old = spark.sql(f"SELECT count(*) AS n FROM {delta_path(path)} WHERE {cond}").first()["n"]
        if old and not dry_run:
            spark.sql(f"DELETE FROM {delta_path(path)} WHERE {cond}")
        verb = "would delete" if dry_run else "deleted"
        done.append(Done(name, "retention", f"{verb} {old:,} row(s) with {column} before {stamp}"))
    return done
