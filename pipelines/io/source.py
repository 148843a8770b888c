"""The ``msglake`` Spark data source: segment directories, batch and streaming.

::

    spark.readStream.format("msglake").option("format", "nsq-ext").load("/data/nsqd")

Offsets are byte positions per segment file, as JSON (``{"version": 1, "segments":
{"orders/orders-0.diskqueue.000000.dat": 4096}}``), readable in the checkpoint. The
latest offset of a segment is the end of what the broker committed there (the codec's
scan decides), so a half-written tail waits for a later batch. Nothing in here knows a
broker format: a codec from :mod:`msglake.formats.registry` scans, splits and decodes.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Iterator, Literal

import pyarrow as pa

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from msglake.formats.base import QuarantineBuilder, SegmentInfo, concat_batches
from msglake.errors import ConfigError
from msglake.formats.options import Options, PositiveInt
from msglake.formats.registry import CODECS, codec_class, get_codec
from msglake.schemas.source import KEYED_SOURCE_SCHEMA, SOURCE_SCHEMA
from msglake.schemas.spark import to_spark

OFFSET_VERSION = 1
LOG = logging.getLogger(__name__)


class ReadOptions(Options):
    """The source's own options (the codec's come from its options model)."""

    #: The segment root folder (an nsqd data path, a RocketMQ store or its commitlog folder).
    path: str
    #: The broker format, a name of :data:`msglake.formats.registry.CODECS`.
    format: Literal[tuple(CODECS)]  # type: ignore[valid-type]
    #: Segment bytes per micro-batch, cut at record boundaries (streaming).
    maxBytesPerTrigger: PositiveInt | None = None
    #: Records per micro-batch (streaming; the driver walks the records to find the cut).
    maxRecordsPerTrigger: PositiveInt | None = None
    #: Largest byte range one Spark task decodes.
    splitBytes: PositiveInt = 64 << 20
    #: Fewest tasks a batch of small ranges is packed into (the job passes Spark's default
    #: parallelism, so a trigger's many small tails keep every core busy); unset: packed by
    #: ``splitBytes`` alone. Ranges are never cut to reach it.
    minPartitions: PositiveInt | None = None
    #: Add each row's producer-retry key as column ``dedupKey`` (``transforms.dedup.arrow_keys``,
    #: made where the row is decoded): the ingest sink's retry marking writes it instead of
    #: making it again in Spark with ``sha2`` of every key (and, for a key by trace id, of every
    #: body): 1.19M RocketMQ rows from Parquet to Delta took 13.0-13.4 s with Spark's keys,
    #: 11.3-12.2 s with the keys carried in.
    dedupKeys: bool = False


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of the data source: its own and its codec's; errors name the option."""

    read: ReadOptions
    codec_options: Options

    @classmethod
    def parse(cls, options) -> "SourceOptions":
        given = dict(options)
        own = {k.lower() for k in ReadOptions.names()}
        fmt = next((v for k, v in given.items() if k.lower() == "format"), None)
        if not fmt:
            raise ConfigError("msglake source: option 'format' is required (e.g. 'nsq-ext')")
        codec = codec_class(fmt)
        if not any(k.lower() == "path" and v for k, v in given.items()):
            raise ConfigError("msglake source: option 'path' (the segment root folder) is required")
        takes = {k.lower() for k in codec.Options.names()}
        unknown = sorted(k for k in given if k.lower() not in own | takes)
        if unknown:
            known = sorted(ReadOptions.names() + codec.Options.names())
            raise ConfigError(f"msglake source: unknown option(s) {unknown} for format {fmt!r}; known: {known}")
        read = ReadOptions.from_strings({k: v for k, v in given.items() if k.lower() in own}, "msglake source")
        codec_options = codec.Options.from_strings({k: v for k, v in given.items() if k.lower() in takes},
                                                   f"msglake source ({fmt})")
        return cls(read.model_copy(update={"path": os.path.abspath(read.path)}), codec_options)

    @property
    def path(self) -> str:
        return self.read.path

    @property
    def format(self) -> str:
        return self.read.format

    def codec(self):
        return get_codec(self.format, self.codec_options)


class MsglakeDataSource(DataSource):
    """Broker segment files as a table of decoded messages and quarantined records."""

    @classmethod
    def name(cls) -> str:
        return "msglake"

    def schema(self):
        return to_spark(KEYED_SOURCE_SCHEMA if SourceOptions.parse(self.options).read.dedupKeys else SOURCE_SCHEMA)

    def reader(self, schema) -> DataSourceReader:
        return SegmentBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return SegmentStreamReader(SourceOptions.parse(self.options))


class _Planner:
    """Driver-side view of the segment root: scans, and cuts byte ranges into Spark partitions."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self.codec = opts.codec()
        self.segments: dict[str, SegmentInfo] = {}  # as of the latest scan
        self.seen: dict[str, SegmentInfo] = {}  # every segment ever scanned (names deleted ones)
        self.ignored: dict[str, str] = {}
        self.notes: list[str] = []

    def scan(self) -> dict[str, SegmentInfo]:
        result = self.codec.scan(self.opts.path)
        self.segments = {s.path: s for s in result.segments}
        self.seen.update(self.segments)
        self.ignored, self.notes = result.ignored, result.notes
        return self.segments

    def lost(self, path: str, a: int, b: int | None) -> tuple:
        """A range that reports committed bytes of a deleted segment as lost."""
        seg = self.seen.get(path)
        return (seg.to_dict() if seg else None, path, a, b, True)

    def plan(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        """The tasks of one batch: each a list of (segment, path, from, to, deleted) byte ranges."""
        ranges: list[tuple] = []
        for path in sorted(end):
            a, b = start.get(path, 0), end[path]
            if b <= a:
                continue
            seg = self.segments.get(path)
            if seg is None:
                self.scan()
                seg = self.segments.get(path)
            if seg is None or not os.path.exists(os.path.join(self.opts.path, path)):
                ranges.append(self.lost(path, a, b))
                continue
            cuts = self.codec.split_points(self.opts.path, seg, a, b, self.opts.read.splitBytes)
            bounds = [a, *cuts, b]
            ranges.extend((seg.to_dict(), path, x, y, False) for x, y in zip(bounds, bounds[1:]))
        return [InputPartition(task) for task in pack(ranges, self.opts.read.splitBytes, self.opts.read.minPartitions)]


#: What one more byte range costs a task, counted in bytes as Spark's
#: ``spark.sql.files.openCostInBytes`` counts opening a file: packing by bytes alone would put
#: thousands of tiny tails in one task. A range costs about 0.2-0.3 ms beyond its bytes (opening
#: the file, a chunk's Arrow batch; twice with retry marking), while a byte costs a task the whole
#: ingest's ~50-100 ns (decode, checks, Arrow to the JVM, Parquet): about 16 KiB. The cost was
#: 256 KiB, the decoder's speed alone, which cut 10,000 segments of 64 KiB into 50 tasks instead
#: of 13, and every task costs the ingest tens to hundreds of milliseconds (bench_many_topics.py,
#: one warm session, alternated: 29.5-29.7 s against 24.6-25.2 s with 16 KiB, 25.3-27.9 s with 8 or 32 KiB).
OPEN_COST_BYTES = 16 << 10
#: The least a task is given when a batch is spread over ``minPartitions``: a micro-batch of a
#: few small tails runs as one task (two tasks for one topic's two tails made its freshness
#: worse, bench_stream.py: p95 2.60-2.86 s against 2.09-2.60 s), while a thousand queues' tails
#: (about 16 MiB counted with their open costs) still fill two.
MIN_TASK_BYTES = 4 << 20


def pack(ranges: list[tuple], split_bytes: int, min_tasks: int | None = None) -> list[list[tuple]]:
    """Byte ranges into tasks of at most ``split_bytes`` (each range counted with
    :data:`OPEN_COST_BYTES`), in path order: a backlog of many small segments runs as a few
    tasks, not one task per file (each task costs tens of milliseconds), and the segments of one
    queue (topic partition) stay together, so a task writes one file per table partition it
    covers instead of a piece of every queue (9,094 files instead of about a thousand for 500
    topics x 2 partitions). With ``min_tasks``, a task holds no more than its share of the whole
    (as Spark sizes file splits by ``totalBytes / defaultParallelism``) or
    :data:`MIN_TASK_BYTES`, whichever is more, so the tails of a thousand queues still keep that
    many cores busy.

    >>> sizes = [pack([(None, "p", 0, n, False) for n in ns], 64 << 10) for ns in ([10 << 10] * 10, [6 << 20, 5 << 20])]
    >>> [[len(task) for task in tasks] for tasks in sizes]
    [[2, 2, 2, 2, 2], [1, 1]]
    >>> [[len(t) for t in pack([(None, "p", 0, 1 << 20, False)] * 10, 64 << 20, n)] for n in (None, 2)]
    [[10], [5, 5]]
    """
    def size(r: tuple) -> int:
        return r[3] - r[2] if r[3] is not None else 0

    if min_tasks:
        whole = sum(size(r) + OPEN_COST_BYTES for r in ranges)
        split_bytes = min(split_bytes, max(MIN_TASK_BYTES, -(-whole // min_tasks)))
    tasks: list[list[tuple]] = []
    current: list[tuple] = []
    used = 0
    for r in sorted(ranges, key=lambda r: (r[1], r[2])):
        cost = size(r) + OPEN_COST_BYTES
        if current and used + cost > split_bytes:
            tasks.append(current)
            current, used = [], 0
        current.append(r)
        used += cost
    if current:
        tasks.append(current)
    return tasks


#: Rows of small ranges go to Spark in Arrow batches of about this size: each batch costs the
#: JVM a fixed amount, and a task over hundreds of small segments would otherwise send as many
#: tiny ones. A batch of at least half of it (a chunk of a large segment) goes on its own, not
#: copied into a larger one.
BATCH_BYTES = 4 << 20


def read_task(opts: SourceOptions, partition: InputPartition) -> Iterator:
    """Decode the byte ranges of one planned task into Arrow batches (runs in a Spark task), with
    their rows' keys when the source's ``dedupKeys`` option asks for them."""
    batches = _read_task(opts, partition)
    return map(_with_keys, batches) if opts.read.dedupKeys else batches


def _with_keys(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its rows' ``dedupKey`` (null for a row without one: a quarantined record has none)."""
    from msglake.transforms.dedup import arrow_keys

    return batch.append_column(KEYED_SOURCE_SCHEMA.field("dedupKey"), arrow_keys(batch).column("dedupKey"))


def _read_task(opts: SourceOptions, partition: InputPartition) -> Iterator:
    codec = opts.codec()  # once per task: a packed task holds many ranges
    pending: list = []
    size = 0
    for r in partition.value:
        for batch in read_range(opts, codec, r):
            # The buffers' sizes, not nbytes: nbytes walks every column's slice (about 80 µs for
            # a batch of this schema), a fixed cost that small segments pay once each.
            own = batch.get_total_buffer_size()
            if own >= BATCH_BYTES // 2:
                if pending:
                    yield concat_batches(pending)
                    pending, size = [], 0
                yield batch
                continue
            pending.append(batch)
            size += own
            if size >= BATCH_BYTES:
                yield concat_batches(pending)
                pending, size = [], 0
    if pending:
        yield concat_batches(pending)


def read_range(opts: SourceOptions, codec, r: tuple) -> Iterator:
    """Decode one byte range (segment, path, from, to, deleted) into Arrow batches."""
    seg_dict, path, a, b, deleted = r
    seg = SegmentInfo.from_dict(seg_dict) if seg_dict else SegmentInfo(path, os.path.basename(path), None, None, 0, True, None, 0)
    if not deleted:
        try:
            for res in codec.decode(opts.path, seg, a, b):
                yield res.batch
            return
        except FileNotFoundError:
            pass
    # The file went away (retention) before these committed bytes were read: say so in the
    # quarantine table rather than skip them silently.
    qb = QuarantineBuilder(codec.source_format, seg)
    if b is None:
        qb.add_loss(a, 0, f"segment deleted before it was read: bytes from {a} on are lost (size unknown)")
    else:
        qb.add_loss(a, b - a, f"segment deleted before it was read: bytes {a}..{b} are lost")
    yield qb.build()


def raw_record_reader(fmt: str, root: str, codec_options):
    """A ``mapInArrow`` function that fills ``rawBytes`` of located rows by reading their bytes back.

    Rows carry ``segment`` (a file name), ``segmentPosition`` and ``recordLength``; the segment is
    found under ``root`` by the codec's scan. Used for decoded messages that a quality rule moves
    to quarantine (their bytes are not kept by the decode pass, which would double its memory).
    A segment deleted in between leaves ``rawBytes`` empty and says so in ``reason``.
    """
    def read(batches):
        paths: dict[tuple, str] | None = None
        for batch in batches:
            if paths is None:
                # By topic and file name: a file name alone can repeat (a queue file misplaced in another topic).
                scan = get_codec(fmt, codec_options).scan(root)
                paths = {(s.topic, os.path.basename(s.path)): os.path.join(root, s.path) for s in scan.segments}
            raw, reasons = [], []
            columns = batch.select(["topic", "segment", "segmentPosition", "recordLength", "reason"]).to_pydict()
            for topic, seg, pos, length, reason in zip(*columns.values()):
                try:
                    # A CommitLog file holds every topic: its scan entry has no topic.
                    with open(paths.get((topic, seg)) or paths[(None, seg)], "rb") as f:
                        f.seek(pos)
                        data = f.read(length)
                except (KeyError, FileNotFoundError):
                    data = b""
                if len(data) != length:
                    reason += "; raw bytes unavailable: the segment was deleted or cut before they were copied"
                raw.append(data)
                reasons.append(reason)
            names = batch.schema.names
            out = batch.set_column(names.index("reason"), "reason", pa.array(reasons, pa.string()))
            yield out.set_column(names.index("rawBytes"), "rawBytes", pa.array(raw, pa.binary()))

    return read


class SegmentBatchReader(DataSourceReader):
    """``spark.read.format("msglake")``: everything committed at planning time."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts

    def partitions(self):
        planner = _Planner(self.opts)
        segments = planner.scan()
        return planner.plan({}, {p: s.committed_end for p, s in segments.items()})

    def read(self, partition):
        _freeze_survivors()
        return read_task(self.opts, partition)


def _freeze_survivors() -> None:
    """Leave what this Spark Python worker holds at a task's start out of its cycle collections.

    A reused worker collects its whole heap after every task (pyspark's daemon calls
    ``gc.collect()``): with pyspark, pyarrow and msglake imported, about 35 ms a collection, and
    in perf of a RocketMQ read as many of a worker's samples as the core's hottest function.
    ``gc.freeze`` moves what the worker holds when a task's read starts (what survived that
    collection: modules, classes, caches; and the task's set-up: its context and the unpickled
    reader, which form no cycles) to the permanent generation, so the collections walk only what
    the reads make (the workers' CPU for the suite's 1M RocketMQ set, read into a ``noop`` sink:
    median 2.45 -> 2.30 s). Only in Spark's workers (this is called from the readers' ``read``):
    in the driver, frozen objects that later form garbage cycles would never be freed."""
    gc.freeze()


def _positions(offset: dict) -> dict[str, int]:
    if offset.get("version") != OFFSET_VERSION:
        raise ValueError(f"msglake source: offset version {offset.get('version')!r} is not {OFFSET_VERSION}")
    return {k: int(v) for k, v in offset.get("segments", {}).items()}


def _offset(positions: dict[str, int]) -> dict:
    return {"version": OFFSET_VERSION, "segments": dict(sorted(positions.items()))}


class SegmentStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("msglake")``: follows appends, rollover, new topics and partitions.

    Segments deleted by the broker's retention leave the offsets; if one goes before all its
    committed bytes were read, the offset of that batch lists it under ``"deleted"`` (visible
    in the query progress) and the batch carries a quarantine row with the lost range.
    """

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self.planner = _Planner(opts)
        self._target: dict[str, int] | None = None
        self._known_end: dict[str, int] = {}  # committed end seen per segment, across scans
        self._last: dict[str, int] = {}

    def initialOffset(self) -> dict:
        return {**_offset({}), "complete": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.read.maxRecordsPerTrigger is not None:
            return ReadMaxRows(self.opts.read.maxRecordsPerTrigger)
        if self.opts.read.maxBytesPerTrigger is not None:
            return ReadMaxBytes(self.opts.read.maxBytesPerTrigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {p: s.committed_end for p, s in self._scan().items()}

    def _scan(self) -> dict[str, SegmentInfo]:
        segments = self.planner.scan()
        # Remember committed ends across scans: a segment deleted later is judged by them.
        for p, seg in segments.items():
            self._known_end[p] = max(self._known_end.get(p, 0), seg.committed_end)
        return segments

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begun = _positions(start)
        segments = self._scan()
        ends = {p: s.committed_end for p, s in segments.items()}
        if self._target is not None:
            ends = {p: min(e, self._target[p]) for p, e in ends.items() if p in self._target}
        out: dict[str, int] = {}
        deleted: dict[str, list] = {}
        complete = set(start.get("complete", []))
        for path, pos in begun.items():
            if path in segments:
                out[path] = pos
                continue
            # A vanished segment leaves the offsets (nsqd never reuses a file number). It lost
            # nothing if it was sealed and fully read; else it went with bytes we had not read,
            # or (after a restart, nothing remembered) possibly so.
            known = self._known_end.get(path)
            if path not in complete and (known is None or known > pos):
                deleted[path] = [pos, known]
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if not isinstance(limit, ReadAllAvailable):
            # One ReadLimit reaches us; apply both configured budgets.
            max_bytes = max_bytes if max_bytes is not None else self.opts.read.maxBytesPerTrigger
            max_rows = max_rows if max_rows is not None else self.opts.read.maxRecordsPerTrigger
        for path, end in sorted(ends.items()):
            a = out.get(path, 0)
            out[path] = a
            if end <= a:
                continue
            if max_bytes is None and max_rows is None:
                out[path] = end
                continue
            if (max_bytes is not None and max_bytes <= 0) or (max_rows is not None and max_rows <= 0):
                continue
            if max_rows is None and end - a <= max_bytes:
                # The rest of the segment fits the byte budget: its end is a boundary the scan
                # found, so the records need no walk (the driver's walk is one Python step each).
                out[path] = end
                max_bytes -= end - a
                continue
            stop, records = self.planner.codec.advance(self.opts.path, segments[path], a, end, max_bytes, max_rows)
            out[path] = stop
            if max_bytes is not None:
                max_bytes -= stop - a
            if max_rows is not None:
                max_rows -= records
        self._last = out
        offset = _offset(out)
        # Sealed segments read to their end: their later deletion by retention is expected.
        offset["complete"] = sorted(p for p, pos in out.items() if segments[p].sealed and pos >= segments[p].committed_end)
        if deleted:
            offset["deleted"] = deleted
        return offset

    def reportLatestOffset(self):
        """Backlog per topic/partition: bytes on disk past the positions of the latest offset."""
        backlog: dict[str, int] = {}
        for path, seg in self.planner.segments.items():
            key = f"{seg.topic}/{seg.partition}" if seg.partition is not None else seg.path
            backlog[key] = backlog.get(key, 0) + max(seg.file_size - self._last.get(path, 0), 0)
        return {"version": OFFSET_VERSION, "backlog": dict(sorted(backlog.items()))}

    def partitions(self, start: dict, end: dict):
        parts = self.planner.plan(_positions(start), _positions(end))
        lost = [self.planner.lost(path, a, b) for path, (a, b) in sorted(end.get("deleted", {}).items())]
        return parts + ([InputPartition(lost)] if lost else [])

    def read(self, partition):
        _freeze_survivors()
        return read_task(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: positions live in the checkpoint, segments belong to the broker."""


#: A micro-batch of at least this many bytes is decoded in the driver by its pool of processes, one
#: per core (``DriverReader.map``); a smaller one (a streaming trigger's) in the driver's own.
POOL_BYTES = 16 << 20


def _map_task(opts: SourceOptions, part: InputPartition, each) -> list:
    return [each(batch) for batch in read_task(opts, part)]


def _plan_next(opts: SourceOptions, start: dict, least_bytes: int):
    """The end offset and tasks of the micro-batch that would follow ``start`` now under the
    source's default read limit, when it has at least ``least_bytes`` in two tasks or more; else
    None. Run in the idle pool: reading ahead (``DriverReader``). A new reader's: it knows no
    trigger's target (``prepareForTriggerAvailableNow``) and no end of a segment seen before, so
    it foresees Spark's next batch on a backlog that stays as it is, not always on a live one."""
    stream = SegmentStreamReader(opts)
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    parts = stream.partitions(start, end)
    return (end, parts) if _large(parts, least_bytes) else None


def _large(parts: list, least_bytes: int) -> bool:
    """Whether tasks ``parts`` are two or more with at least ``least_bytes`` in their ranges (a
    range lost with its end unknown counts none): a batch for a pool of processes."""
    return len(parts) >= 2 and sum(r[3] - r[2] for p in parts for r in p.value if r[3] is not None) >= least_bytes


def _same(a: dict, b: dict) -> bool:
    """Offsets equal as the checkpoint writes them (JSON), whatever their key order."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class _Ahead:
    """``each`` over the micro-batch expected after ``start``, planned and decoded task by task in
    a thread by the idle pool (``pipelines.io.decoders.idle_pool``)."""

    def __init__(self, opts: SourceOptions, each, start: dict):
        self.opts, self.each, self.start = opts, each, start
        #: The foreseen batch's end and tasks, once planned (None until then, or if it is small).
        self.planned: tuple[dict, list] | None = None
        self._done: dict[int, list] = {}  # task index -> its results
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, name="msglake-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from msglake.pipelines.io.decoders import Cancelled, idle_pool

        def keep(i: int, result: list) -> None:
            with self._lock:
                self._done[i] = result

        try:
            planned = idle_pool().map(_plan_next, [(self.opts, self.start, POOL_BYTES)], cancel=self._cancel)[0]
            if planned is not None:
                self.planned = planned
                idle_pool().map(_map_task, [(self.opts, part, self.each) for part in planned[1]], cancel=self._cancel,
                                each_done=keep)
        except Cancelled:
            pass
        except Exception as e:  # noqa: BLE001 -- only a guess failed: the batch is decoded as without it
            LOG.info("reading the next micro-batch ahead failed (%r); it is decoded when it comes", e)

    def join(self) -> None:
        """Wait until all of it is done (tests)."""
        self._thread.join()

    def take(self, start: dict, end: dict) -> tuple[list, list] | None:
        """When this is the batch asked for (``start`` .. ``end``, of the same ``each``: the caller
        checks), as it was planned: its tasks and the results of those already done (None for the
        others, which are not waited for: at idle priority they may wait long on a busy machine).
        Otherwise None. No task is started after this (those running finish, their results unused)."""
        self._cancel.set()
        planned = self.planned
        if not _same(start, self.start) or planned is None or not _same(end, planned[0]):
            return None
        with self._lock:
            return planned[1], [self._done.get(i) for i in range(len(planned[1]))]

    def cancel(self) -> None:
        self._cancel.set()


class DriverReader:
    """The rows of a micro-batch decoded in the driver, as the source's tasks decode them: what
    retry marking decides a batch's retries from before Spark writes it (``pipelines.io.sinks``).

    ``options``: the source's options (those given to ``spark.readStream.format("msglake")``).
    A batch is given by its start and end offsets, as the checkpoint holds them; no end: every
    record committed on disk now (a batch read's).

    ``ahead``: the function whose :meth:`map` over a large micro-batch (two tasks or more, at
    least :data:`POOL_BYTES`) is also started over the next one, as the source would plan it
    now, by the pool at idle priority, while Spark writes the current batch (in a 4M RocketMQ
    ingest, Spark's tasks left 7-10 s of the two cores idle). When the next batch's offsets are
    the ones foreseen, :meth:`map` takes the tasks done and decodes the rest; otherwise it
    decodes the batch as before. It pays on a backlog (most batches as foreseen), not on a live
    broker's tail, whose batches are small.
    """

    def __init__(self, options: dict[str, str], ahead=None):
        opts = SourceOptions.parse(options)
        # Without the keys column: what the driver's pass is for makes them, with their hashes
        # (``pipelines.io.sinks.chunk_keys``), from the same function as the source's tasks.
        self.opts = SourceOptions(opts.read.model_copy(update={"dedupKeys": False}), opts.codec_options)
        self._stream = SegmentStreamReader(self.opts)
        self._ahead_each = ahead
        self._ahead: _Ahead | None = None
        self._closed = False
        #: Batches served by reading ahead (their tasks as it planned them), and their tasks it
        #: had decoded by the time the batch came.
        self.taken_ahead = self.tasks_ahead = 0

    def warm(self, start: dict | None = None) -> None:
        """Start the driver's pool of decoding processes now, when the batches may be large enough
        to use it: they start while Spark starts the query, not in the first batch. With
        ``ahead``, also read the first batch ahead, from ``start`` (the offset the checkpoint
        committed last; None: the source's beginning)."""
        budget = self.opts.read.maxBytesPerTrigger
        if budget is None or budget >= POOL_BYTES:
            from msglake.pipelines.io.decoders import pool

            pool()
            start = start if start is not None else self._stream.initialOffset()
            if self._ahead_each is not None and self._pending(start) >= POOL_BYTES:
                self._read_ahead(self._ahead_each, start)

    def _pending(self, start: dict) -> int:
        """Bytes committed on disk past ``start`` (a first batch worth reading ahead?)."""
        done = _positions(start)
        return sum(max(seg.committed_end - done.get(path, 0), 0) for path, seg in self._stream.planner.scan().items())

    def map(self, each, start: dict | None = None, end: dict | None = None) -> list:
        """``each(batch)`` of every Arrow batch of the micro-batch's rows, in order (``each``: a
        function of a module, so that it reaches the pool's processes by name).

        A large batch's tasks run in the driver's pool of processes (``pipelines.io.decoders``), a
        core each: the decode of a task of many small segments is mostly Python steps, which
        threads would run one at a time (10,000 segments of 64 KiB: 2.7 s on one thread, 2.8 s
        on two). A batch of less than :data:`POOL_BYTES` runs here.
        """
        if start is None:
            start = self._stream.initialOffset()
        if end is None:
            end = self._stream.latestOffset(start, ReadAllAvailable())
        taken = None
        if self._ahead is not None and each is self._ahead.each:  # another function's pass leaves it be
            ahead, self._ahead = self._ahead, None
            taken = ahead.take(start, end)
        if taken is not None:
            parts, outs = taken
            self.taken_ahead += 1
            self.tasks_ahead += sum(o is not None for o in outs)
        else:
            parts = self._stream.partitions(start, end)
            outs = [None] * len(parts)
        todo = [i for i, o in enumerate(outs) if o is None]
        if not _large([parts[i] for i in todo], POOL_BYTES):
            for i in todo:
                outs[i] = _map_task(self.opts, parts[i], each)
        else:
            from msglake.pipelines.io.decoders import pool

            for i, out in zip(todo, pool().map(_map_task, [(self.opts, parts[i], each) for i in todo])):
                outs[i] = out
        if _large(parts, POOL_BYTES):  # a backlog's batch, most likely
            self._read_ahead(each, end)
        return [out for task in outs for out in task]

    def _read_ahead(self, each, end: dict) -> None:
        if each is self._ahead_each and not self._closed:
            self._ahead = _Ahead(self.opts, each, end)

    def close(self) -> None:
        """Stop reading ahead (the query has stopped; a batch still being decoded reads none)."""
        self._closed = True
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None
