"""The ``msglake`` Spark data source: segment directories, batch and streaming.

::

    spark.readStream.format("msglake").option("format", "nsq-ext").load("/data/nsqd")

Offsets are byte positions per segment file, as JSON (``{"version": 1, "segments":
{"orders/orders-0.diskqueue.000000.dat": 4096}}``), readable in the checkpoint. The
latest offset of a segment is the end of what the broker committed there (the codec's
scan decides), so a half-written tail waits for a later batch. Nothing in here knows a
broker format: a codec from :mod:`formats.registry` scans, splits and decodes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from formats.base import QuarantineBuilder, SegmentInfo
from formats.registry import OPTION_NAMES, get_codec, inapplicable
from schemas.source import SOURCE_SCHEMA
from schemas.spark import to_spark

OFFSET_VERSION = 1
#: Options of the source itself; the codec's options (``storeHost``, ``delayLevels``, ...) come
#: from :data:`formats.registry.OPTION_NAMES`.
SOURCE_OPTIONS = {"path", "format", "maxbytespertrigger", "maxrecordspertrigger", "splitbytes"}
_CODEC_OPTIONS = {k.lower(): k for k in OPTION_NAMES}


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of the data source; errors name the option."""

    path: str
    format: str
    max_bytes_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    split_bytes: int = 64 << 20
    #: Codec keyword arguments, as sorted (name, value) pairs.
    codec_options: tuple = ()

    @classmethod
    def parse(cls, options) -> "SourceOptions":
        opts = {k.lower(): v for k, v in dict(options).items()}
        unknown = sorted(set(opts) - SOURCE_OPTIONS - set(_CODEC_OPTIONS))
        if unknown:
            known = sorted(SOURCE_OPTIONS | set(_CODEC_OPTIONS))
            raise ValueError(f"msglake source: unknown option(s) {unknown}; known: {known}")
        if not opts.get("path"):
            raise ValueError("msglake source: option 'path' (the segment root folder) is required")
        if not opts.get("format"):
            raise ValueError("msglake source: option 'format' is required (e.g. 'nsq-ext')")
        get_codec(opts["format"])  # fails early, naming the known formats

        def positive(key: str) -> int | None:
            if opts.get(key) in (None, ""):
                return None
            try:
                v = int(opts[key])
            except ValueError:
                raise ValueError(f"msglake source: option '{key}' must be a positive integer, got {opts[key]!r}") from None
            if v <= 0:
                raise ValueError(f"msglake source: option '{key}' must be a positive integer, got {v}")
            return v

        given = {_CODEC_OPTIONS[k]: v for k, v in opts.items() if k in _CODEC_OPTIONS and v not in (None, "")}
        wrong = inapplicable(opts["format"], given)
        if wrong:
            raise ValueError(f"msglake source: option(s) {wrong} do not apply to format {opts['format']!r}")
        codec = {}
        for key, value in given.items():
            if key in ("decompress", "verifyCrc"):
                if str(value).lower() not in ("true", "false"):
                    raise ValueError(f"msglake source: option '{key}' must be true or false, got {value!r}")
                value = str(value).lower() == "true"
            elif key == "fileSize":
                value = positive(key.lower())
            codec[OPTION_NAMES[key]] = value
        try:
            get_codec(opts["format"], **codec)  # the codec checks its values (a delay table that does not parse)
        except ValueError as e:
            raise ValueError(f"msglake source: {e}") from None
        return cls(
            path=os.path.abspath(opts["path"]),
            format=opts["format"],
            max_bytes_per_trigger=positive("maxbytespertrigger"),
            max_records_per_trigger=positive("maxrecordspertrigger"),
            split_bytes=positive("splitbytes") or 64 << 20,
            codec_options=tuple(sorted(codec.items())),
        )

    def codec(self):
        return get_codec(self.format, **dict(self.codec_options))


class MsglakeDataSource(DataSource):
    """Broker segment files as a table of decoded messages and quarantined records."""

    @classmethod
    def name(cls) -> str:
        return "msglake"

    def schema(self):
        return to_spark(SOURCE_SCHEMA)

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

    def lost(self, path: str, a: int, b: int | None) -> InputPartition:
        """A partition that reports committed bytes of a deleted segment as lost."""
        seg = self.seen.get(path)
        return InputPartition((seg.to_dict() if seg else None, path, a, b, True))

    def plan(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        parts: list[InputPartition] = []
        for path in sorted(end):
            a, b = start.get(path, 0), end[path]
            if b <= a:
                continue
            seg = self.segments.get(path)
            if seg is None:
                self.scan()
                seg = self.segments.get(path)
            if seg is None or not os.path.exists(os.path.join(self.opts.path, path)):
                parts.append(self.lost(path, a, b))
                continue
            cuts = self.codec.split_points(self.opts.path, seg, a, b, self.opts.split_bytes)
            bounds = [a, *cuts, b]
            parts.extend(InputPartition((seg.to_dict(), path, x, y, False)) for x, y in zip(bounds, bounds[1:]))
        return parts


def read_range(opts: SourceOptions, partition: InputPartition) -> Iterator:
    """Decode one planned range into Arrow batches (runs in a Spark task)."""
    seg_dict, path, a, b, deleted = partition.value
    seg = SegmentInfo.from_dict(seg_dict) if seg_dict else SegmentInfo(path, os.path.basename(path), None, None, 0, True, None, 0)
    if not deleted:
        try:
            for res in opts.codec().decode(opts.path, seg, a, b):
                yield res.batch
            return
        except FileNotFoundError:
            pass
    # The file went away (retention) before these committed bytes were read: say so in the
    # quarantine table rather than skip them silently.
    qb = QuarantineBuilder(opts.codec().source_format, seg)
    if b is None:
        qb.add_loss(a, 0, f"segment deleted before it was read: bytes from {a} on are lost (size unknown)")
    else:
        qb.add_loss(a, b - a, f"segment deleted before it was read: bytes {a}..{b} are lost")
    yield qb.build()


def raw_record_reader(fmt: str, root: str, codec_options: dict):
    """A ``mapInArrow`` function that fills ``rawBytes`` of located rows by reading their bytes back.

    Rows carry ``segment`` (a file name), ``segmentPosition`` and ``recordLength``; the segment is
    found under ``root`` by the codec's scan. Used for decoded messages that a quality rule moves
    to quarantine (their bytes are not kept by the decode pass, which would double its memory).
    A segment deleted in between leaves ``rawBytes`` empty and says so in ``reason``.
    """
    def read(batches):
        import pyarrow as pa

        paths: dict[tuple, str] | None = None
        for batch in batches:
            if paths is None:
                # By topic and file name: a file name alone can repeat (a queue file misplaced in another topic).
                scan = get_codec(fmt, **codec_options).scan(root)
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
        return read_range(self.opts, partition)


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
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
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
            max_bytes = max_bytes if max_bytes is not None else self.opts.max_bytes_per_trigger
            max_rows = max_rows if max_rows is not None else self.opts.max_records_per_trigger
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
        for path, (a, b) in sorted(end.get("deleted", {}).items()):
            parts.append(self.planner.lost(path, a, b))
        return parts

    def read(self, partition):
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: positions live in the checkpoint, segments belong to the broker."""
