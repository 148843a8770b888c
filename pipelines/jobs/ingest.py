"""``msglake ingest`` / ``msglake stream``: segments -> decode -> Delta ``messages`` + ``quarantine``.

One Structured Streaming query over the ``msglake`` source serves both: with
``trigger(availableNow=True)`` (``ingest``, the scheduled batch job) it processes what is
committed on disk when it starts and stops; with a processing-time trigger (``stream``) it
follows the broker's appends until stopped. Its checkpoint remembers the byte position reached in every segment, so a re-run adds
nothing and bytes appended since are picked up; writes are idempotent Delta appends.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass, field

from msglake.errors import QualityRuleFailed
from msglake.formats.registry import get_codec
from msglake.pipelines.io import checkpoint as cp
from msglake.pipelines.io.catalog import ensure_table
from msglake.pipelines.io.offsets import ConsumerOffsetRecorder
from msglake.pipelines.io.paths import check_lake_root, check_source_folder
from msglake.pipelines.io.progress import ProgressReporter
from msglake.pipelines.jobs.running import wait_or_stop
from msglake.pipelines.settings import Settings, SourceSettings
from msglake.pipelines.io.sinks import DeltaSink, RunCounts, chunk_keys
from msglake.pipelines.io.source import DriverReader, raw_record_reader
from msglake.schemas import CONSUMER_OFFSETS_TABLE, MESSAGES_TABLE, QUARANTINE_TABLE


@dataclass
class IngestSummary:
    """What one run did, and how every byte on disk is accounted for."""

    source: str
    batches: int
    messages: int
    message_bytes: int
    quarantined: int
    quarantined_bytes: int
    seconds: float
    read_bytes: int  # segment bytes this run's micro-batches covered (from their offsets)
    read_total: int  # bytes of the segments on disk now that the checkpoint has passed
    on_disk: int  # bytes in segment files now
    pending: int  # bytes on disk not read yet (uncommitted tails, data past the writer meta)
    tables: dict[str, str] = field(default_factory=dict)
    #: Segment bytes of each micro-batch, in order.
    batch_bytes: list[int] = field(default_factory=list)
    #: Segments retention deleted before all their committed bytes were read.
    deleted_unread: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    #: Bytes of the ignored files: under the source root, but no segment bytes (not in on_disk).
    ignored_bytes: int = 0
    #: Bytes that hold no record by design (RocketMQ's end-of-file blanks).
    padding_bytes: int = 0
    #: Rows of consumer-offset snapshots written (RocketMQ stores with config/consumerOffset.json).
    offset_rows: int = 0
    #: Quality rule -> (level, decoded messages it matched).
    rule_hits: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        """This run's decoded + quarantined (+ padding) bytes equal the bytes its offsets covered."""
        return self.message_bytes + self.quarantined_bytes + self.padding_bytes == self.read_bytes

    def lines(self) -> list[str]:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        out = [
            f"source {self.source}: {self.batches} batch(es) in {self.seconds:.1f}s",
            f"  decoded      {self.messages:>12,} messages  {self.message_bytes:>14,} bytes  ({rate:,.0f} msg/s)",
            f"  quarantined  {self.quarantined:>12,} records   {self.quarantined_bytes:>14,} bytes",
            *([f"  end-of-file padding (no records)   {self.padding_bytes:>14,} bytes"] if self.padding_bytes else []),
            f"  on disk {self.on_disk:,} bytes = read {self.read_total:,} + pending {self.pending:,}",
            "  every byte of this run is accounted for (decoded + quarantined + padding = bytes read)"
            if self.balanced
            else f"  WARNING: decoded + quarantined + padding "
            f"({self.message_bytes + self.quarantined_bytes + self.padding_bytes:,}) "
            f"!= bytes read this run ({self.read_bytes:,})",
        ]
        for path, (a, b) in sorted(self.deleted_unread.items()):
            lost = f"bytes {a}..{b}" if b is not None else f"bytes from {a} on (size unknown)"
            out.append(f"  LOST: {path} was deleted before it was read: {lost} (a quarantine row records it)")
        for rule, (level, n) in sorted(self.rule_hits.items()):
            what = "kept in messages" if level == "warn" else "moved to quarantine"
            out.append(f"  quality rule {rule} ({level}): {n:,} message(s), {what}")
        if self.offset_rows:
            out.append(f"  consumer offsets: {self.offset_rows:,} rows snapshotted into consumer_offsets")
        out += [f"  note: {n}" for n in self.notes]
        if self.ignored:
            shown = sorted(self.ignored.items())[:5]
            more = f", ... {len(self.ignored) - len(shown)} more" if len(self.ignored) > len(shown) else ""
            out.append(f"  not read: {len(self.ignored)} file(s), {self.ignored_bytes:,} bytes under the source root "
                       "that are no segments (not counted in on disk): "
                       + ", ".join(f"{p} ({why})" for p, why in shown) + more)
        return out


def source_options(spark, settings: Settings, src: SourceSettings) -> dict[str, str]:
    """The options of one configured source's ``msglake`` reader."""
    options = {
        "format": src.format,
        "path": os.path.abspath(src.path),
        "maxBytesPerTrigger": str(src.maxBytesPerTrigger or settings.ingest.maxBytesPerTrigger),
        "splitBytes": str(settings.ingest.splitBytes),
        "minPartitions": str(spark.sparkContext.defaultParallelism),
        # Retry marking writes each message's key: the tasks that decode the rows make it.
        "dedupKeys": str(settings.ingest.dedupWatermarkSeconds > 0).lower(),
    }
    return {**options, **src.codec_options().to_strings()}


def source_reader(spark, settings: Settings, src: SourceSettings):
    """The streaming DataFrame of one configured source."""
    return spark.readStream.format("msglake").options(**source_options(spark, settings, src)).load()


def _disk_accounting(src: SourceSettings, positions: dict[str, int]):
    scan = get_codec(src.format, src.codec_options()).scan(os.path.abspath(src.path))
    sizes = {s.path: s.file_size for s in scan.segments}
    on_disk = sum(sizes.values())
    read = sum(pos for p, pos in positions.items() if p in sizes)
    return on_disk, read, on_disk - read, scan


def ingest(spark, settings: Settings, source: str | None = None) -> IngestSummary:
    """Run the available-now ingest of one source (the scheduled batch job) and return its summary."""
    return run(spark, settings, source, available_now=True)


def run(
    spark,
    settings: Settings,
    source: str | None = None,
    *,
    available_now: bool = True,
    interval: str = "5 seconds",
    stop: threading.Event | None = None,
    stop_timeout: float = 60.0,
    progress: ProgressReporter | None = None,
) -> IngestSummary:
    """Run the ingest query of one source until it ends (available-now) or ``stop`` is set.

    Parameters
    ----------
    available_now : bool
        Process what is committed on disk at the start, then stop (``trigger(availableNow=True)``);
        otherwise run micro-batches every ``interval`` and follow new data until stopped.
    stop : threading.Event, optional
        Set it (from a signal handler, say) to stop: the running micro-batch is given
        ``stop_timeout`` seconds to finish, then abandoned. Either way the checkpoint stays
        valid and a restart continues exactly where the last committed batch ended.
    progress : ProgressReporter, optional
        Receives every batch's progress (live line, JSON-lines metrics).
    """
    src = settings.source(source)
    check_source_folder(src.name, src.path)
    check_lake_root(settings.lake.root, write=True)
    checkpoint = settings.lake.checkpoint_path(f"ingest-{src.name}")
    tables = {spec.name: ensure_table(spark, settings, spec) for spec in (MESSAGES_TABLE, QUARANTINE_TABLE)}
    counts = RunCounts()
    offsets = ConsumerOffsetRecorder(spark, settings, src) if src.format == "rocketmq-commitlog" else None
    if offsets is not None:
        offsets.record_soon()
    marking = settings.ingest.dedupWatermarkSeconds > 0
    reader = None
    try:
        # With marking on, a backlog's next batch has its keys made while Spark writes the current one.
        reader = DriverReader(source_options(spark, settings, src), ahead=chunk_keys if marking else None)
        if marking:
            reader.warm(cp.committed_offset(checkpoint))
        sink = _LazySink(src.name, checkpoint, tables, counts, settings.ingest.dedupWatermarkSeconds, reader, offsets,
                         dict(rules=settings.quality.rule_context(settings.policies), levels=settings.quality.levels(),
                              raw_reader=raw_record_reader(src.format, os.path.abspath(src.path), src.codec_options())))
        listener = None
        if progress is not None:
            progress.counts = counts
            listener = progress.listener()
            spark.streams.addListener(listener)
        started = time.monotonic()
        writer = (
            source_reader(spark, settings, src)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .queryName(f"msglake-ingest-{src.name}")
        )
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=interval)
        query = writer.start()
        try:
            wait_or_stop(query, stop, stop_timeout)
        except Exception:
            if sink.failure is not None:
                raise sink.failure from None  # the rule's own message, not Spark's wrapped traceback
            raise
        finally:
            if listener is not None:
                # Progress events reach the listener asynchronously: let the last one arrive.
                done = [p["batchId"] for p in query.recentProgress if p.get("numInputRows")]
                if done:
                    progress.wait_for(max(done))
                spark.streams.removeListener(listener)
        notes = sink.finish(spark)  # the query has stopped (wait_or_stop returns only then)
    except BaseException:
        if offsets is not None:
            offsets.settle()  # no snapshot is left being written after the run
        raise
    finally:
        if reader is not None:
            reader.close()
    if offsets is not None:
        offsets.record()  # consumers may have moved even when no message arrived
        if offsets.path is not None:
            tables[CONSUMER_OFFSETS_TABLE.name] = offsets.path
    seconds = time.monotonic() - started
    on_disk, read_total, pending, scan = _disk_accounting(src, cp.committed_positions(checkpoint))
    return IngestSummary(
        source=src.name,
        batches=len(counts.batches),
        messages=counts.total("messages"),
        message_bytes=counts.total("message_bytes"),
        quarantined=counts.total("quarantined"),
        quarantined_bytes=counts.total("quarantined_bytes"),
        padding_bytes=counts.total("padding_bytes"),
        seconds=seconds,
        read_bytes=counts.total("read_bytes"),
        deleted_unread={p: r for b in counts.batches for p, r in b.deleted.items()},
        batch_bytes=[b.read_bytes for b in sorted(counts.batches, key=lambda b: b.batch_id)],
        read_total=read_total,
        on_disk=on_disk,
        pending=pending,
        tables=tables,
        notes=scan.notes + (offsets.problems if offsets is not None else []) + notes,
        ignored=scan.ignored,
        ignored_bytes=scan.ignored_bytes,
        offset_rows=offsets.rows_written if offsets is not None else 0,
        rule_hits={rule: (settings.quality.levels()[rule], n) for rule, n in counts.rule_hits().items()},
    )


class _LazySink:
    """Builds the Delta sink on the first batch, once Spark has written the checkpoint's query id.

    The id marks the sink's commits (:class:`msglake.pipelines.io.once.OnceWriter`): a new checkpoint
    (new query id) must not inherit the batch ids of an old one, or its first batches would be
    skipped as replays.
    """

    def __init__(self, source: str, checkpoint: str, tables: dict[str, str], counts: RunCounts, watermark: int,
                 reader: DriverReader, offsets: ConsumerOffsetRecorder | None = None, quality: dict | None = None):
        self.source, self.checkpoint, self.tables, self.counts = source, checkpoint, tables, counts
        self.watermark = watermark
        #: The batches' rows decoded in the driver, for retry marking.
        self.reader = reader
        self.offsets = offsets
        self.quality = quality or {}
        self._sink: DeltaSink | None = None
        self.failure: QualityRuleFailed | None = None

    def finish(self, spark) -> list[str]:
        """The query has stopped: leave what the next run of this checkpoint can start from.
        Returns notes for the run's summary."""
        return [] if self._sink is None else self._sink.finish(spark)

    def __call__(self, df, batch_id: int) -> None:
        if self._sink is None:
            app_id = f"msglake-ingest:{self.source}:{cp.query_id(self.checkpoint)}"
            self._sink = DeltaSink(app_id, self.tables[MESSAGES_TABLE.name], self.tables[QUARANTINE_TABLE.name],
                                   self.counts, self.watermark, checkpoint=self.checkpoint, **self.quality)
        # The offsets of this batch are in the checkpoint already (written before it ran).
        start, end = cp.batch_offset(self.checkpoint, batch_id - 1), cp.batch_offset(self.checkpoint, batch_id)
        read_bytes = cp.bytes_moved(start, end) if end else None
        rows = functools.partial(self.reader.map, start=start, end=end) if end else None
        try:
            batch = self._sink(df, batch_id, rows)
        except QualityRuleFailed as e:
            self.failure = e
            raise
        batch.read_bytes = read_bytes or 0
        batch.deleted = (end or {}).get("deleted", {})
        if self.offsets is not None:
            self.offsets.record()
