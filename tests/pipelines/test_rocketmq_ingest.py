"""RocketMQ stores through the msglake source into the same Delta tables as NSQ."""
from __future__ import annotations

import os
import threading
import time

import pytest
from pyspark.sql import functions as F

from msglake.errors import ConfigError
from msglake.formats import rocketmq_layout as L
from msglake.formats.rocketmq_commitlog import RocketMqOptions
from msglake.samples.rocketmq import GROUP, generate
from msglake.samples.rocketmq_writer import CommitLogWriter, Message, write_consumer_offsets
from msglake.pipelines import settings as settings_mod
from msglake.pipelines.io.catalog import ensure_table
from msglake.pipelines.jobs.ingest import ingest, run
from msglake.schemas import MESSAGES_TABLE
from tests.conftest import make_settings, two_broker_settings

pytestmark = pytest.mark.slow


def keyed(df):
    return {(r.topic, r.partition, r.segment, r.segmentPosition): r for r in df.collect()}


def test_ingest_matches_ground_truth_and_snapshots_consumer_offsets(spark, tmp_path):
    store = tmp_path / "store"
    truth = generate(str(store), 2500, file_size=128 << 10)
    settings = make_settings(tmp_path / "lake", store, fmt="rocketmq-commitlog", maxBytesPerTrigger=1_500_000)

    first = ingest(spark, settings)
    assert first.balanced and first.batches >= 2, first.lines()
    assert (first.messages, first.quarantined) == (len(truth.messages), len(truth.ingest_quarantine()))
    assert first.padding_bytes == truth.padding_bytes and first.pending == 0

    messages = spark.read.format("delta").load(settings.lake.table_path("messages"))
    got = keyed(messages.select("topic", "partition", "segment", "segmentPosition", "body", "messageId", "uniqueId",
                                "queueOffset", "sourceFormat", "retryOf", "systemCopy"))
    want = truth.by_key()
    assert set(got) == set(want)
    for key, m in want.items():
        r = got[key]
        assert (bytes(r.body), r.messageId, r.uniqueId, r.queueOffset, r.sourceFormat) == (
            m.body, m.message_id, m.unique_id, m.virtual_offset, "rocketmq_commitlog"), key
        assert (tuple(r.retryOf) if r.retryOf else None) == m.retry_of, key
    assert sum(1 for m in want.values() if m.retry_of) >= 5  # producer retries marked by UNIQ_KEY
    assert sum(r.systemCopy for r in got.values()) > 0

    quarantine = spark.read.format("delta").load(settings.lake.table_path("quarantine"))
    q = keyed(quarantine.where(F.col("sourceFormat") == "rocketmq_commitlog"))
    assert sorted((k[2], k[3]) for k in q) == sorted((e.segment, e.position) for e in truth.ingest_quarantine())
    assert all(len(r.rawBytes) == r.recordLength for r in q.values())
    # A record that decodes but carries a topic name no broker accepts: held by the topic_name rule.
    [held] = [r for r in q.values() if r.rule is not None]
    assert (held.rule, held.topic) == ("topic_name", "orders prod") and held.reason.startswith("topic_name: ")

    offsets = spark.read.format("delta").load(settings.lake.table_path("consumer_offsets"))
    rows = {(r.group, r.topic, r.queue): r for r in offsets.collect()}
    assert first.offset_rows == len(rows) and {g for g, _, _ in rows} == {GROUP}
    orders0 = rows[(GROUP, "orders", 0)]
    assert 0 < orders0.offset < orders0.queueMaxOffset
    assert orders0.queueMaxOffset == messages.where("topic = 'orders' AND partition = 0").count()

    # Nothing new: no batch, no new snapshot. Consumers move: a new snapshot only.
    again = ingest(spark, settings)
    assert (again.batches, again.offset_rows) == (0, 0)
    time.sleep(0.05)
    write_consumer_offsets(str(store), {("orders", GROUP): {0: orders0.queueMaxOffset}}, counter=2)
    moved = ingest(spark, settings)
    assert (moved.batches, moved.offset_rows) == (0, 1)
    latest = offsets.where("dataVersion = 2").collect()
    assert [(r.topic, r.queue, r.offset) for r in latest] == [("orders", 0, orders0.queueMaxOffset)]


def test_both_brokers_land_in_the_same_tables(spark, tmp_path):
    # The store given by its commitlog folder: config/ beside it is still found.
    settings = two_broker_settings(tmp_path, 200, 200, rocketmq_path="store/commitlog")
    for name in ("nsq", "rmq"):
        assert ingest(spark, settings, name).balanced
    by_format = {r.sourceFormat: r.n for r in spark.sql(
        "SELECT sourceFormat, count(*) AS n FROM messages GROUP BY sourceFormat").collect()}
    assert set(by_format) == {"nsq_ext", "rocketmq_commitlog"} and min(by_format.values()) >= 200
    assert spark.sql("SELECT count(*) AS n FROM consumer_offsets").first().n > 0


def test_live_commitlog_is_followed_by_the_stream(spark, tmp_path):
    store = tmp_path / "store"
    settings = make_settings(tmp_path / "lake", store, fmt="rocketmq-commitlog")
    w = CommitLogWriter(str(store), 16 << 10)
    written = [w.put(Message("live", b"warm", {"UNIQ_KEY": "W"}))]
    stop = threading.Event()
    result = {}
    job = threading.Thread(target=lambda: result.setdefault(
        "summary", run(spark, settings, available_now=False, interval="500 milliseconds", stop=stop)))
    job.start()
    table = settings.lake.table_path("messages")

    def count():
        if not os.path.isdir(os.path.join(table, "_delta_log")):
            return 0
        return spark.read.format("delta").load(table).count()

    deadline = time.monotonic() + 120
    while count() < 1:
        assert time.monotonic() < deadline and job.is_alive(), "the job did not start"
        time.sleep(0.5)
    for i in range(300):  # ~6 s of appends: files roll every ~40 records
        rec = w.record_bytes(Message("live", b"live-%d" % i, {"UNIQ_KEY": f"L{i}"}, queue_id=i % 3))
        if i % 10 == 0 and w.pos + len(rec) + 8 <= w.file_size:
            # Torn: the header lands first, the rest a moment later, as a reader may see it.
            fd = os.open(os.path.join(w.dir, w.segment), os.O_RDWR)
            os.pwrite(fd, rec[:40], w.pos)
            time.sleep(0.05)
            os.close(fd)
        written.append(w.put(Message("live", b"live-%d" % i, {"UNIQ_KEY": f"L{i}"}, queue_id=i % 3)))
        time.sleep(0.02)
    w.close()
    deadline = time.monotonic() + 120
    while count() < len(written) and time.monotonic() < deadline:
        time.sleep(1)
    stop.set()
    job.join(timeout=120)
    summary = result["summary"]
    assert summary.balanced and summary.batches >= 3 and summary.quarantined == 0, summary.lines()
    got = spark.read.format("delta").load(table).select("segment", "segmentPosition", "uniqueId").collect()
    assert sorted((r.segment, r.segmentPosition, r.uniqueId) for r in got) == sorted(
        (x.segment, x.position, ["W", *[f"L{i}" for i in range(300)]][n]) for n, x in enumerate(written))


def test_format_options_are_checked_against_the_format(tmp_path):
    with pytest.raises(ConfigError, match=r"sources\.0.*delayLevels: not an option of format 'nsq-ext'"):
        make_settings(tmp_path, tmp_path, source={"delayLevels": "1s"})
    with pytest.raises(ConfigError, match=r"sources\.0\.delayLevels.*'5x'"):
        make_settings(tmp_path, tmp_path, fmt="rocketmq-commitlog", source={"delayLevels": "1s 5x"})
    with pytest.raises(ConfigError, match=r"storeHost: not an option of format 'rocketmq-commitlog'"):
        make_settings(tmp_path, tmp_path, fmt="rocketmq-commitlog", source={"storeHost": "1.2.3.4:5"})
    s = make_settings(tmp_path, tmp_path, fmt="rocketmq-commitlog", source={"decompress": True, "delayLevels": "1s"})
    assert s.source().codec_options() == RocketMqOptions(decompress=True, delayLevels="1s")


@pytest.mark.parametrize(
    ("options", "message"),
    [({"format": "nsq-ext", "delayLevels": "1s"}, r"unknown option\(s\) \['delayLevels'\] for format 'nsq-ext'"),
     ({"format": "rocketmq-commitlog", "decompress": "maybe"}, "decompress: Input should be a valid boolean"),
     ({"format": "rocketmq-commitlog", "delayLevels": "soon"}, "delay level 'soon'")],
)
def test_source_codec_option_errors(spark, tmp_path, options, message):
    reader = spark.read.format("msglake").option("path", str(tmp_path))
    for k, v in options.items():
        reader = reader.option(k, v)
    # Spark hands the source its option names in lower case: match the message in any case.
    with pytest.raises(Exception, match="(?i)" + message):
        reader.load().count()


def test_decompress_option_reaches_the_tasks(spark, tmp_path):
    with CommitLogWriter(str(tmp_path), 64 << 10) as w:
        w.put(Message("t", b"z" * 5000, compression="zstd"))
    df = (spark.read.format("msglake").option("format", "rocketmq-commitlog").option("path", str(tmp_path))
          .option("decompress", "true").load())
    [r] = df.where("messageId IS NOT NULL").collect()
    assert bytes(r.body) == b"z" * 5000 and r.compression is None and r.sysFlag & L.COMPRESSED_FLAG


def test_an_older_table_gains_the_new_columns(spark, tmp_path):
    settings = make_settings(tmp_path / "lake")
    path = settings.lake.table_path("messages")
    old = [f for f in MESSAGES_TABLE.schema if f.name not in ("systemCopy", "transactionState")]
    from msglake.schemas.spark import to_spark
    import pyarrow as pa

    spark.createDataFrame([], to_spark(pa.schema(old))).write.format("delta").partitionBy("topic", "partition").save(path)
    ensure_table(spark, settings, MESSAGES_TABLE)
    assert {"systemCopy", "transactionState"} <= set(spark.read.format("delta").load(path).columns)


def test_the_background_offsets_snapshot_is_waited_for(spark, tmp_path):
    # An ingest's first snapshot is written in the background while its query starts (record_soon);
    # the next record() waits for it, and a run that fails settles it: nothing left being written.
    from msglake.pipelines.io.offsets import ConsumerOffsetRecorder

    store = tmp_path / "store"
    generate(str(store), 300, file_size=128 << 10)
    settings = make_settings(tmp_path / "lake", store, fmt="rocketmq-commitlog")
    recorder = ConsumerOffsetRecorder(spark, settings, settings.source())
    recorder.record_soon()
    recorder.settle()
    assert not [t for t in threading.enumerate() if t.name.startswith("msglake-offsets")]
    written = spark.read.format("delta").load(settings.lake.table_path("consumer_offsets")).count()
    assert written == recorder.rows_written > 0
    assert recorder.record() == 0  # the same file: not written again
    # Its failure: settle() leaves it to the run's own error; record() raises it.
    (tmp_path / "taken").write_text("a file where the lake should be")
    blocked = make_settings(tmp_path / "taken" / "lake", store, fmt="rocketmq-commitlog")
    failing = ConsumerOffsetRecorder(spark, blocked, blocked.source())
    failing.record_soon()
    failing.settle()
    failing.record_soon()
    with pytest.raises(Exception):
        failing.record()
