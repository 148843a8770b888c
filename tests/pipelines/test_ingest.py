"""End to end: real segments -> the msglake source -> Delta tables, checked against ground truth."""
from __future__ import annotations

import datetime as dt
import io
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from msglake.formats.base import decode_root
from msglake.formats.nsq_ext import NsqExtCodec
from msglake.samples.nsq import BASE_NS, generate
from msglake.samples.nsq_writer import NsqQueueWriter
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.io.sinks import DeltaSink
from msglake.pipelines.io.source import DriverReader, raw_record_reader
from msglake.schemas.source import SOURCE_SCHEMA
from msglake.schemas.spark import to_spark
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


def read(spark, data, fmt="nsq-ext"):
    """A batch read of the segments under ``data``, and ``rows`` of the same records read in the
    driver (``DriverReader``): what the ingest job gives its sink for a micro-batch."""
    options = {"format": fmt, "path": str(data)}
    return spark.read.format("msglake").options(**options).load(), DriverReader(options).map


def table_keys(spark, path):
    return {
        (r.topic, r.partition, r.segment, r.segmentPosition): r
        for r in spark.read.format("delta").load(path)
        .select("topic", "partition", "segment", "segmentPosition", "messageId", "body", "traceId", "tags",
                "priority", "queueOffset", "storeHost", "retryOf")
        .collect()
    }


def test_ingest_twice_with_an_append_between_matches_ground_truth(spark, tmp_path):
    data = tmp_path / "nsq"
    truth = generate(str(data), 3000, max_bytes_per_file=128 << 10)
    settings = make_settings(tmp_path / "lake", data)

    first = ingest(spark, settings)
    assert first.balanced and first.messages == len(truth.messages)
    assert first.quarantined == len(truth.quarantined) and first.pending == truth.pending_bytes
    # Warn-level quality rules keep the messages that break them, and count them.
    assert first.rule_hits == {rule: ("warn", n) for rule, n in truth.warned.items()}
    assert "  quality rule priority_range (warn): 1 message(s), kept in messages" in first.lines()
    # The run left its first copies for the next one (retry marking is on by default).
    assert (Path(settings.lake.checkpoint_path("ingest-test")) / "first-copies" / "index.json").is_file()

    # The broker appends to a live queue and rolls a new segment.
    w = NsqQueueWriter(str(data), "orders", 1, max_bytes_per_file=1 << 20, file_num=50, virtual_start=10**9,
                       first_message_id=10**6)
    added = [w.put(b"appended-%d" % i, header={"##trace_id": str(i + 1)}, timestamp_ns=BASE_NS) for i in range(25)]
    w.close()

    second = ingest(spark, settings)
    assert second.balanced and second.messages == 25 and second.quarantined == 0

    third = ingest(spark, settings)
    assert third.batches == 0 and third.messages == 0 and third.read_bytes == 0
    assert third.read_total + third.pending == third.on_disk and third.pending == truth.pending_bytes

    # A producer retry stored after its first copy was written, by an earlier run: marked from the
    # first copies already in the table (the sample's own retries follow their first copy at once).
    header = {"##trace_id": "4242", "bornHost": "10.9.9.9:5000"}
    with NsqQueueWriter(str(data), "orders", 1, max_bytes_per_file=1 << 20, file_num=70, virtual_start=2 * 10**9,
                        first_message_id=2 * 10**6) as w:
        first_copy = w.put(b"paid", header=header, timestamp_ns=BASE_NS)
        w.flush()
        assert ingest(spark, settings).messages == 1
        retry = w.put(b"paid", header=header, timestamp_ns=BASE_NS + 5 * 10**9)
    assert ingest(spark, settings).messages == 1
    retried = (1, first_copy.segment, first_copy.position)

    # Retention removes a sealed segment that was read to its end: expected, nothing is lost.
    os.remove(data / "orders" / "orders-0.diskqueue.000000.dat")
    fourth = ingest(spark, settings)
    assert fourth.deleted_unread == {} and fourth.quarantined == 0 and fourth.balanced

    got = table_keys(spark, settings.lake.table_path("messages"))
    want = truth.by_key()
    assert len(got) == len(want) + 25 + 2
    assert got[("orders", *retried)].retryOf is None
    assert tuple(got[("orders", 1, retry.segment, retry.position)].retryOf) == retried
    for key, m in want.items():
        r = got[key]
        assert (r.messageId, bytes(r.body), r.traceId, r.tags, r.priority) == (
            m.message_id, m.body, m.trace_id, m.tags, m.priority)
        assert r.storeHost == "10.0.0.7:4150"
        assert (tuple(r.retryOf) if r.retryOf else None) == m.retry_of, key
    assert sum(1 for m in want.values() if m.retry_of) > 10  # producer retries are in the sample, and marked
    for i, a in enumerate(added):
        r = got[("orders", 1, a.segment, a.position)]
        assert bytes(r.body) == b"appended-%d" % i and r.queueOffset == a.virtual_offset and r.traceId == str(i + 1)

    q = spark.read.format("delta").load(settings.lake.table_path("quarantine"))
    assert sorted((r.segment, r.segmentPosition) for r in q.collect()) == sorted(
        (x.segment, x.position) for x in truth.quarantined)
    assert q.where(F.col("rawBytes").isNull() | (F.length("rawBytes") == 0)).count() == 0

    # Partitioned by topic/partition on disk, and reachable by name through the catalog.
    assert os.path.isdir(os.path.join(settings.lake.table_path("messages"), "topic=orders", "partition=1"))
    by_sql = spark.sql("SELECT topic, partition, count(*) AS n FROM messages GROUP BY topic, partition").collect()
    assert sum(r.n for r in by_sql) == len(want) + 25 + 2


def test_small_trigger_budget_runs_several_bounded_batches_with_the_same_result(spark, tmp_path):
    data = tmp_path / "nsq"
    truth = generate(str(data), 1500, max_bytes_per_file=64 << 10, bad_inputs=False)
    # Retry marking off: the sink counts each batch while writing it (no counting pass).
    settings = make_settings(tmp_path / "lake", data, maxBytesPerTrigger=100_000, splitBytes=20_000,
                             dedupWatermarkSeconds=0)
    summary = ingest(spark, settings)
    assert summary.batches >= 5 and summary.balanced
    # Each micro-batch stays within the budget (a record is never split, so at most one more).
    assert max(summary.batch_bytes) <= 100_000 + 1100 and sum(summary.batch_bytes) == summary.read_bytes
    assert summary.messages == len(truth.messages)
    assert set(table_keys(spark, settings.lake.table_path("messages"))) == set(truth.by_key())
    # Columns of distinct values are written without a Parquet dictionary; the others keep it
    # (where it pays: the writer drops it itself in a file of a few rows).
    dictionary = Counter()  # column -> files where it is dictionary-encoded
    for file in Path(settings.lake.table_path("messages")).rglob("*.parquet"):
        meta = pq.ParquetFile(file).metadata.row_group(0)
        dictionary.update(meta.column(i).path_in_schema for i in range(meta.num_columns)
                          if any("DICTIONARY" in e for e in meta.column(i).encodings))
    assert not {"body", "messageId", "storeTimestamp", "segmentPosition"} & set(dictionary)
    assert dictionary["sourceFormat"] > 0 and dictionary["storeHost"] > 0


def test_a_backlogs_batches_read_ahead_mark_the_retries_of_the_ground_truth(spark, tmp_path, monkeypatch):
    # With retry marking on, the driver decodes a backlog's next batch ahead while Spark writes
    # the current one (DriverReader's ahead); what it read ahead marks the same retries.
    from msglake.pipelines.io import decoders, source as S

    data = tmp_path / "nsq"
    truth = generate(str(data), 1500, max_bytes_per_file=64 << 10)
    settings = make_settings(tmp_path / "lake", data, maxBytesPerTrigger=250_000, splitBytes=50_000)
    monkeypatch.setattr(S, "POOL_BYTES", 0)  # every batch of two tasks or more is a large one
    # At idle priority, the reading ahead may wait out a whole batch on a busy machine (the
    # batch then decodes itself); here it is not to wait, so that the test sees it used.
    monkeypatch.setattr(decoders, "idle_pool", decoders.pool)
    taken = []
    take = S._Ahead.take

    def seen(self, *args):
        got = take(self, *args)
        taken.append(0 if got is None else sum(out is not None for out in got[1]))  # tasks decoded ahead
        return got

    monkeypatch.setattr(S._Ahead, "take", seen)
    summary = ingest(spark, settings)
    assert summary.batches >= 3 and summary.balanced and summary.messages == len(truth.messages)
    assert sum(1 for n in taken if n) >= 2
    got = table_keys(spark, settings.lake.table_path("messages"))
    want = truth.by_key()
    assert sum(1 for m in want.values() if m.retry_of) > 5
    for key, m in want.items():
        assert (tuple(got[key].retryOf) if got[key].retryOf else None) == m.retry_of, key


def test_each_batch_is_stamped_with_one_time_and_its_id_on_both_tables(spark, tmp_path):
    data = tmp_path / "nsq"
    truth = generate(str(data), 1500, max_bytes_per_file=64 << 10)
    settings = make_settings(tmp_path / "lake", data, maxBytesPerTrigger=150_000, splitBytes=40_000)
    started = dt.datetime.now(dt.timezone.utc)
    summary = ingest(spark, settings)
    ended = dt.datetime.now(dt.timezone.utc)
    assert summary.batches >= 3 and summary.quarantined == len(truth.quarantined) > 0
    stamps = {}
    for table, at in (("messages", "ingestedAt"), ("quarantine", "quarantinedAt")):
        # As epoch microseconds: collected timestamps would come back in the local zone.
        rows = (spark.read.format("delta").load(settings.lake.table_path(table)).groupBy("ingestBatchId")
                .agg(F.min(F.unix_micros(at)).alias("first"), F.max(F.unix_micros(at)).alias("last")).collect())
        assert all(r.first == r.last for r in rows), table  # one time per batch
        stamps[table] = {r.ingestBatchId: dt.datetime.fromtimestamp(r.first / 1e6, dt.timezone.utc) for r in rows}
    assert set(stamps["messages"]) == set(range(summary.batches))
    times = [stamps["messages"][b] for b in sorted(stamps["messages"])]
    assert times == sorted(times) and started <= times[0] and times[-1] <= ended
    # A batch's quarantine rows are written after its messages, in the same batch.
    assert all(stamps["messages"][b] <= t for b, t in stamps["quarantine"].items())


def test_a_batch_write_reuses_the_code_spark_generated_for_the_last(spark, tmp_path):
    """The batch's id and time are no literals in the writes' plans: Spark would write their
    values into the code it generates and compile every batch's anew (then the JVM, its machine
    code). Both tables' writes, the messages with a retry to mark and held rows read back."""
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import MESSAGES_TABLE, QUARANTINE_TABLE
    from msglake.transforms.dedup import RETRY_LOCATION

    data = tmp_path / "nsq"
    generate(str(data), 300, max_bytes_per_file=64 << 10)
    settings = make_settings(tmp_path / "lake")
    paths = [ensure_table(spark, settings, spec) for spec in (MESSAGES_TABLE, QUARANTINE_TABLE)]
    sink = DeltaSink("test-app", *paths, dedup_watermark_seconds=600, levels={"priority_range": "quarantine"})
    df = sink.checked(read(spark, data)[0])
    where = [F.col(c) for c in RETRY_LOCATION]
    retries = (df.where(F.col("reason").isNull()).select(*where).limit(1)
               .withColumn("retryOf", F.struct(*where)).localCheckpoint(eager=True))
    reader = raw_record_reader("nsq-ext", str(data), {})
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()

    def write(batch_id):
        before = compiled.getCount()
        frames = (sink.plan.messages(df, batch_id, retries), sink.plan.quarantine(df, batch_id, raw_reader=reader))
        for frame, path in zip(frames, paths):
            frame.write.format("delta").mode("append").save(path)
        return compiled.getCount() - before

    write(11)
    assert write(12) == 0
    # The counter sees a plan whose literal is new (else the test could not fail).
    before = compiled.getCount()
    df.select("topic", F.lit(dt.datetime.now().microsecond * 1000 + 7).alias("x")).write.format("noop").mode(
        "overwrite").save()
    assert compiled.getCount() > before


# Each batch's retries are decided from its keys made in the driver: a batch that repeats no key
# runs no Spark job to decide (the first has no retry, its write joins none); the others have some,
# of an earlier batch (its first copy's row kept by the sink) and of their own.
def test_retries_of_an_earlier_batch_of_the_same_run_are_marked_from_what_the_sink_kept(spark, tmp_path):
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    settings = make_settings(tmp_path / "lake")
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    header = {"##trace_id": "4242", "bornHost": "10.9.9.9:5000"}
    batches = []
    for batch, (second, bodies) in enumerate([(0, [b"paid", b"shipped"]), (5, [b"paid", b"new"]),
                                              (9, [b"shipped", b"paid", b"gift", b"gift"])]):
        data = tmp_path / f"nsq{batch}"
        with NsqQueueWriter(str(data), "orders", batch) as w:
            put = [w.put(body, header=header, timestamp_ns=BASE_NS + (second + i) * 10**9)
                   for i, body in enumerate(bodies)]
        batches.append((read(spark, data), put))
    sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600)
    for batch, ((df, rows), _) in enumerate(batches):
        sink(df, batch, rows)
    assert sink.firsts.reads == 0  # the table was new at batch 0; batches 1 and 2 decided from its first copies kept
    assert sink.firsts.row_reads == 0  # their rows too: the first copies' rows came from the sink, not the table
    # Batch 0 repeats no key: the driver knows it has no retry. Batch 1 repeats one of batch 0,
    # batch 2 one of its own and one of each earlier batch: both decided by Spark.
    assert sink.without_decision == 1

    got = table_keys(spark, paths["messages"])
    [(_, (paid, shipped)), (_, (paid_again, new)), (_, (shipped_again, paid_third, gift, gift_again))] = batches

    def retry_of(partition, record):
        r = got[("orders", partition, record.segment, record.position)].retryOf
        return tuple(r) if r else None

    first_paid, first_shipped = (0, paid.segment, paid.position), (0, shipped.segment, shipped.position)
    assert [retry_of(0, paid), retry_of(0, shipped), retry_of(1, new)] == [None, None, None]
    assert [retry_of(1, paid_again), retry_of(2, shipped_again), retry_of(2, paid_third)] == [
        first_paid, first_shipped, first_paid]
    # A copy and its retry within one batch.
    assert [retry_of(2, gift), retry_of(2, gift_again)] == [None, (2, gift.segment, gift.position)]


def test_a_copy_stored_before_the_first_copy_in_the_table_is_its_retry(spark, tmp_path):
    # Queues read at different paces bring store times out of order: a producer's retry, stored
    # in partition 1 at +5 s, is written by batch 0 as the first copy; the copy it repeats, stored
    # in partition 0 at +3 s (and that one's own retry at +4 s), comes in batch 1. The table must
    # not get a second first copy: `WHERE retryOf IS NULL` keeps one copy of each message.
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    settings = make_settings(tmp_path / "lake")
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    header = {"##trace_id": "4242", "bornHost": "10.9.9.9:5000"}
    sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600)
    placed = []
    for partition, seconds in [(1, [5]), (0, [3, 4, 700])]:
        data = tmp_path / f"nsq{partition}"
        with NsqQueueWriter(str(data), "orders", partition) as w:
            placed.append([w.put(b"paid", header=header, timestamp_ns=BASE_NS + s * 10**9) for s in seconds])
        df, rows = read(spark, data)
        sink(df, len(placed) - 1, rows)
    [[later], [earlier, its_retry, much_later]] = placed

    got = table_keys(spark, paths["messages"])
    first = (1, later.segment, later.position)
    assert got[("orders", *first)].retryOf is None
    assert [tuple(got[("orders", 0, r.segment, r.position)].retryOf) for r in (earlier, its_retry)] == [first, first]
    # More than the watermark after the first copy: a message of its own again.
    assert got[("orders", 0, much_later.segment, much_later.position)].retryOf is None


def test_a_batch_of_a_few_rows_per_table_partition_is_written_uncompressed(spark, tmp_path):
    # Snappy's set-up per column of each file costs a file of a few rows more than it saves
    # (TINY_FILE_BYTES): a batch spread over many queues writes its messages uncompressed; one
    # whose files hold more keeps Snappy. Both are read back whole.
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    settings = make_settings(tmp_path / "lake")
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600)
    spread, bulk = tmp_path / "spread", tmp_path / "bulk"
    for t in range(6):
        for partition in range(2):
            with NsqQueueWriter(str(spread), f"t{t}", partition) as w:
                w.put(b"tiny %d/%d" % (t, partition))
    with NsqQueueWriter(str(bulk), "bulk", 0) as w:
        for i in range(300):
            w.put(b"%05d" % i + b"x" * 200)
    for batch, data in enumerate([spread, bulk]):
        df, rows = read(spark, data)
        counts = sink(df, batch, rows)
        assert counts.messages == (12, 300)[batch]

    codecs = Counter()  # (topic is "bulk", codec) -> column chunks
    for file in Path(paths["messages"]).rglob("*.parquet"):
        meta = pq.ParquetFile(file).metadata.row_group(0)
        codecs.update((file.parent.parent.name == "topic=bulk", meta.column(i).compression)
                      for i in range(meta.num_columns))
    assert {bulk for bulk, _ in codecs} == {False, True}
    assert {codec for bulk, codec in codecs if not bulk} == {"UNCOMPRESSED"}
    assert {codec for bulk, codec in codecs if bulk} == {"SNAPPY"}
    rows = spark.read.format("delta").load(paths["messages"]).groupBy(F.col("topic") == "bulk").count().collect()
    assert sorted(r["count"] for r in rows) == [12, 300]
    # `msglake optimize` rewrites them with the session's codec.
    from msglake.pipelines.jobs.maintenance import optimize

    optimize(spark, settings, ["messages"])
    live = spark.read.format("delta").load(paths["messages"]).inputFiles()
    assert len(live) == 13 and {pq.ParquetFile(f.removeprefix("file:")).metadata.row_group(0).column(0).compression
                                for f in live} == {"SNAPPY"}


def test_a_later_run_starts_from_the_first_copies_the_last_run_left(spark, tmp_path):
    """A scheduled run marks retries of an earlier run's messages from the first copies that run
    left in its checkpoint, without reading the table; a run the index does not stand for, or an
    index damaged on disk, reads the table, and marks the same."""
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.pipelines.io.first_copies import INDEX
    from msglake.schemas import LAKE_TABLES

    settings = make_settings(tmp_path / "lake")
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    index = tmp_path / "checkpoint" / INDEX

    def batch(partition, second, bodies):
        data = tmp_path / f"nsq{partition}"
        with NsqQueueWriter(str(data), "orders", partition) as w:
            put = [w.put(body, header={"##trace_id": "4242", "bornHost": "10.9.9.9:5000"},
                         timestamp_ns=BASE_NS + (second + i) * 10**9) for i, body in enumerate(bodies)]
        return read(spark, data), put

    def sink(app="test-app", watermark=600):
        return DeltaSink(app, paths["messages"], paths["quarantine"], dedup_watermark_seconds=watermark,
                         checkpoint=str(index.parent))

    def retry_of(partition, record):
        r = table_keys(spark, paths["messages"])[("orders", partition, record.segment, record.position)].retryOf
        return tuple(r) if r else None

    def at(second):
        return dt.datetime.fromtimestamp(BASE_NS / 1e9 + second, dt.timezone.utc)

    # Run 1: two batches, 500 s apart.
    run = sink()
    df, (paid, shipped) = batch(0, 0, [b"paid", b"shipped"])
    run(df[0], 0, df[1])
    df, (gift,) = batch(1, 500, [b"gift"])
    run(df[0], 1, df[1])
    assert run.finish(spark) == [] and (index / "index.json").is_file()

    # Run 2, the next of the same query: its batches decide from what run 1 left. The batch at
    # 700 s moves the window past paid and shipped (stored at 0-1 s), not past gift (500 s):
    # what run 1 left must still serve the batch at 800 s.
    run = sink()
    df, (paid_again,) = batch(2, 505, [b"paid"])
    run(df[0], 2, df[1])
    df, (gift_again, shipped_again) = batch(3, 700, [b"gift", b"shipped"])
    run(df[0], 3, df[1])
    df, (gift_third,) = batch(4, 800, [b"gift"])
    run(df[0], 4, df[1])
    assert run.firsts.reads == 0
    first_gift = (1, gift.segment, gift.position)
    assert [retry_of(2, paid_again), retry_of(3, gift_again), retry_of(3, shipped_again), retry_of(4, gift_third)] == [
        (0, paid.segment, paid.position), first_gift, None, first_gift]
    assert run.finish(spark) == [] and len([p for p in index.iterdir() if p.name.startswith("hashes-")]) == 1

    # Runs the index does not stand for: another query's (a new checkpoint), another watermark.
    for other in (sink(app="another-query"), sink(watermark=300)):
        other.firsts.hashes(spark, at(900))
        assert other.firsts.reads == 1 and other.firsts.notes == []
    # An index damaged on disk: its hashes cut short, or unreadable.
    (hashes,) = [p for p in index.iterdir() if p.name.startswith("hashes-")]
    saved = hashes.read_bytes()
    with open(hashes, "wb") as f:
        np.save(f, np.load(io.BytesIO(saved))[:-1])
    cut = sink()
    cut.firsts.hashes(spark, at(900))
    assert cut.firsts.reads == 1 and "incomplete" in cut.firsts.notes[0]
    hashes.write_bytes(b"not numpy")
    broken = sink()
    broken.firsts.hashes(spark, at(900))
    assert broken.firsts.reads == 1 and "did not read back" in broken.firsts.notes[0]
    hashes.write_bytes(saved)

    # Another writer commits to the table: the index no longer stands for it.
    df, (elsewhere,) = batch(5, 810, [b"elsewhere"])
    DeltaSink("another-writer", paths["messages"], paths["quarantine"])(df[0], 0)
    df, (gift_fourth, shipped_late) = batch(6, 820, [b"gift", b"shipped"])
    run = sink()
    run(df[0], 5, df[1])
    assert run.firsts.reads == 1
    assert [retry_of(6, gift_fourth), retry_of(6, shipped_late), retry_of(5, elsewhere)] == [
        first_gift, (3, shipped_again.segment, shipped_again.position), None]


@pytest.mark.parametrize("counted", ["while writing", "before writing"])
def test_a_replayed_batch_is_not_written_twice(spark, tmp_path, counted):
    data = tmp_path / "nsq"
    generate(str(data), 200, bad_inputs=True)
    settings = make_settings(tmp_path / "lake", data)
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    df, rows = read(spark, data)
    if counted == "while writing":  # one pass: counts observed on the messages write
        sink = DeltaSink("test-app", paths["messages"], paths["quarantine"],
                         raw_reader=raw_record_reader("nsq-ext", str(data), {}), dedup_watermark_seconds=600)
    else:  # a quarantine-level rule and no raw reader: a counting pass first (no row may be held)
        sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600)
    assert sink._needs_count_pass() == (counted == "before writing")
    sink(df, 0, rows)
    sink(df, 0, rows)  # asked twice in one run
    # Spark replays batch 0 after a crash between the Delta commit and the checkpoint: a new sink.
    restarted = DeltaSink("test-app", paths["messages"], paths["quarantine"], raw_reader=sink.raw_reader,
                          dedup_watermark_seconds=sink.watermark)
    restarted(df, 0, rows)
    messages = spark.read.format("delta").load(paths["messages"])
    assert messages.count() == df.where("reason IS NULL").count()
    assert spark.read.format("delta").load(paths["quarantine"]).count() == df.where("reason IS NOT NULL").count()
    assert [b.messages for b in sink.counts.batches + restarted.counts.batches] == [messages.count()] * 3


def test_batch_read_equals_the_codec_output(spark, tmp_path):
    data = tmp_path / "nsq"
    generate(str(data), 300, max_bytes_per_file=32 << 10)
    expected = decode_root(NsqExtCodec(storeHost="1.2.3.4:5"), str(data)).table
    schema = to_spark(SOURCE_SCHEMA)
    expected_df = spark.createDataFrame(expected)  # Arrow table in, same schema
    actual = (spark.read.format("msglake").option("format", "nsq-ext").option("path", str(data))
              .option("storeHost", "1.2.3.4:5").option("splitBytes", "4096").load())
    cols = [c for c in schema.fieldNames() if c not in ("properties", "headers")]  # maps have no order
    assert_df_equality(actual.select(cols), expected_df.select(cols), ignore_row_order=True, ignore_nullable=True)
    assert actual.where(F.size("headers") > 0).count() == expected_df.where(F.size("headers") > 0).count()


def test_a_batchs_records_that_did_not_decode_are_written_from_the_drivers_pass(spark, tmp_path):
    """With retry marking on, the driver's pass has decoded the batch: its records that did not
    decode go to ``quarantine`` from there, and Spark scans the batch once (for ``messages``), not
    a second time for them. The rows are the ones a scan finds."""
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    data = tmp_path / "nsq"
    generate(str(data), 300, max_bytes_per_file=16 << 10, bad_inputs=True)
    paths = {spec.name: ensure_table(spark, make_settings(tmp_path / "lake"), spec) for spec in LAKE_TABLES}
    options = {"format": "nsq-ext", "path": str(data), "splitBytes": "4096"}
    df = spark.read.format("msglake").options(**options, dedupKeys="true").load()
    tasks = df.rdd.getNumPartitions()
    assert tasks > 2
    # As the ingest job makes it: with a raw reader, so no counting pass comes first.
    sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600,
                     raw_reader=raw_record_reader("nsq-ext", str(data), {}))
    sc = spark.sparkContext
    sc.setJobGroup("driver-quarantine", "one scan")
    try:
        counts = sink(df, 0, DriverReader(options).map)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    sc._jsc.sc().listenerBus().waitUntilEmpty()  # the tracker hears of jobs through Spark's listener bus
    tracker = sc.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup("driver-quarantine")]
    stages = [s for job in jobs if job is not None for s in job.stageIds]
    scans = [s for s in stages if tracker.getStageInfo(s) and tracker.getStageInfo(s).numTasks == tasks]
    assert len(scans) == 1  # the messages write; the quarantine's rows came from the driver
    cols = ["segment", "segmentPosition", "recordLength", "reason", "rawBytes"]
    scanned = df.where("reason IS NOT NULL").select(cols)
    written = spark.read.format("delta").load(paths["quarantine"]).select(cols)
    assert counts.quarantined == written.count() > 0
    assert_df_equality(written, scanned, ignore_row_order=True, ignore_nullable=True)

    # A driver's pass that saw other broken records than the write (here: one fewer) is not
    # taken: the batch is scanned again, and its quarantine is still the scan's.
    from msglake.pipelines.io.sinks import chunk_keys

    def one_fewer(each):
        out = DriverReader(options).map(each)
        if each is chunk_keys:
            i = next(k for k, c in enumerate(out) if c[4] is not None and len(c[4]))
            out[i] = (*out[i][:4], out[i][4].slice(1))
        return out

    paths = {spec.name: ensure_table(spark, make_settings(tmp_path / "other"), spec) for spec in LAKE_TABLES}
    DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600,
              raw_reader=raw_record_reader("nsq-ext", str(data), {}))(df, 0, one_fewer)
    written = spark.read.format("delta").load(paths["quarantine"]).select(cols)
    assert_df_equality(written, scanned, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("fmt", ["nsq-ext", "rocketmq-commitlog"])
def test_the_keys_the_source_makes_are_sparks(spark, tmp_path, fmt):
    """With ``dedupKeys`` the source's tasks make each row's retry key: the one Spark's
    ``dedup_key`` makes of the same row (null where it gives none: quarantined records, messages
    without a unique or trace id), on every row of segments with retries and bad inputs."""
    from msglake.samples import generate as generate_any
    from msglake.schemas.source import KEYED_SOURCE_SCHEMA
    from msglake.transforms.dedup import dedup_key

    data = tmp_path / "data"
    generate_any(fmt, str(data), 400, segment_bytes=64 << 10)
    options = {"format": fmt, "path": str(data), "splitBytes": "8192"}
    plain = spark.read.format("msglake").options(**options).load()
    assert "dedupKey" not in plain.columns
    keyed = spark.read.format("msglake").options(**options, dedupKeys="true").load()
    assert keyed.schema == to_spark(KEYED_SOURCE_SCHEMA)
    counts = keyed.agg(
        F.count("*").alias("rows"), F.count("dedupKey").alias("keyed"), F.count("reason").alias("quarantined"),
        F.sum((~F.col("dedupKey").eqNullSafe(dedup_key())).cast("int")).alias("differ")).first()
    assert counts["differ"] == 0
    # Rows with a key, rows without one, quarantined rows: every kind was compared.
    assert 0 < counts["keyed"] < counts["rows"] - counts["quarantined"] and counts["quarantined"] > 0


@pytest.mark.parametrize(
    ("options", "message"),
    [({"format": "nsq-ext"}, "option 'path'"), ({"path": "/x"}, "option 'format'"),
     ({"path": "/x", "format": "kafka"}, "format 'kafka' is not known"),
     ({"path": "/x", "format": "nsq-ext", "maxBytesPerTrigger": "-3"}, "maxbytespertrigger"),
     ({"path": "/x", "format": "nsq-ext", "minPartitions": "0"}, "minpartitions"),
     ({"path": "/x", "format": "nsq-ext", "colour": "red"}, "unknown option")],
)
def test_source_option_errors_name_the_option(spark, options, message):
    reader = spark.read.format("msglake")
    for k, v in options.items():
        reader = reader.option(k, v)
    # Spark hands the source its option names in lower case: match the message in any case.
    with pytest.raises(Exception, match="(?i)" + message):
        reader.load().count()


# A quarantine-level rule that reads more than a retry key (priority_range) may hold one copy of a
# message and not another: the sink finds which copies it holds before deciding retries, so a held
# copy (in quarantine, with its raw bytes) is never the first copy a message in the table points to.
def test_a_held_copy_is_no_first_copy(spark, tmp_path):
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import LAKE_TABLES

    born = BASE_NS // 1_000_000
    header = {"##trace_id": "77", "bornHost": "10.9.9.9:5000"}
    data = [tmp_path / "held", tmp_path / "warned"]
    with NsqQueueWriter(str(data[0]), "orders", 0) as w:
        held = [w.put(b"loud", header={**header, "priority": 15}, timestamp_ns=BASE_NS),  # held back
                w.put(b"paid", header=header, timestamp_ns=BASE_NS + 10**9),
                w.put(b"paid", header=header, timestamp_ns=BASE_NS + 2 * 10**9),  # its retry
                w.put(b"loud", header=header, timestamp_ns=BASE_NS + 3 * 10**9)]  # the held one's retry
    with NsqQueueWriter(str(data[1]), "orders", 1) as w:
        warned = [w.put(b"stale", header={"bornTimestamp": born, "expireTime": born - 1000}, timestamp_ns=BASE_NS),
                  w.put(b"fine", timestamp_ns=BASE_NS)]
    levels = {"priority_range": "quarantine", "expire_before_born": "warn"}
    settings = make_settings(tmp_path / "lake")
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    sink = DeltaSink("test-app", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600,
                     levels=levels, raw_reader=raw_record_reader("nsq-ext", str(data[0]), {}))
    counts = []
    for batch, d in enumerate(data):
        df, rows = read(spark, d)
        counts.append(sink(df, batch, rows))
    assert [(c.messages, c.quarantined, c.rule_hits) for c in counts] == [
        (3, 1, {"priority_range": 1}), (2, 0, {"expire_before_born": 1})]
    got = table_keys(spark, paths["messages"])
    assert sorted(bytes(r.body) for r in got.values()) == [b"fine", b"loud", b"paid", b"paid", b"stale"]

    def retry_of(record):
        r = got[("orders", 0, record.segment, record.position)].retryOf
        return tuple(r) if r else None

    assert [retry_of(r) for r in held[1:]] == [None, (0, held[1].segment, held[1].position), None]
    [q] = spark.read.format("delta").load(paths["quarantine"]).collect()
    assert (q.rule, q.reason, q.segmentPosition) == ("priority_range", "priority_range: priority 15 outside 1..10",
                                                     held[0].position)
    with open(os.path.join(data[0], "orders", q.segment), "rb") as f:
        f.seek(q.segmentPosition)
        assert bytes(q.rawBytes) == f.read(q.recordLength)
