"""Streaming reliability: the real `msglake stream` job as a subprocess, killed, restarted, stopped."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
import yaml
from pyspark.sql import functions as F

from msglake.samples.nsq import generate, write_live
from msglake.samples.truth import Expected
from msglake.samples.nsq_writer import NsqQueueWriter
from msglake.pipelines.io import checkpoint as cp
from msglake.pipelines.io.catalog import ensure_table
from msglake.schemas import LAKE_TABLES
from msglake.pipelines.io.sinks import DeltaSink, RunCounts
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


def write_conf(tmp_path, data, name: str = "conf.yaml", **ingest) -> str:
    doc = make_settings(tmp_path / "lake", data, **ingest).model_dump()
    doc["spark"]["conf"]["spark.sql.shuffle.partitions"] = "2"
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@contextmanager
def start(conf: str, *args: str, log):
    """The stream job in a session of its own; whatever the test does, nothing of it outlives the block
    (a failed assertion used to leave the job and its JVM running)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "msglake.pipelines.cli", "stream", "--conf", conf, "--quiet", *args],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def delta_versions(table_path: str) -> int:
    log = os.path.join(table_path, "_delta_log")
    return len([n for n in os.listdir(log) if n.endswith(".json")]) if os.path.isdir(log) else 0


def assert_exactly_once(spark, settings, truth):
    messages = spark.read.format("delta").load(settings.lake.table_path("messages"))
    keys = [tuple(r) for r in messages.select("topic", "partition", "segment", "segmentPosition").collect()]
    assert len(keys) == len(set(keys)), "a message was written twice"
    want = truth.by_key()
    assert set(keys) == set(want)
    bodies = {tuple(r[:4]): bytes(r[4]) for r in messages.select("topic", "partition", "segment", "segmentPosition", "body").collect()}
    assert all(bodies[k] == m.body for k, m in want.items())
    quarantine = spark.read.format("delta").load(settings.lake.table_path("quarantine"))
    qkeys = [(r.segment, r.segmentPosition) for r in quarantine.collect()]
    assert len(qkeys) == len(set(qkeys)), "a quarantine row was written twice"
    assert sorted(qkeys) == sorted((q.segment, q.position) for q in truth.quarantined)


def test_sigkill_anywhere_then_restart_gives_every_message_exactly_once(spark, tmp_path):
    data = tmp_path / "nsq"
    truth = generate(str(data), 2500, max_bytes_per_file=48 << 10)
    conf = write_conf(tmp_path, data, maxBytesPerTrigger=120_000, splitBytes=40_000)
    settings = make_settings(tmp_path / "lake", data)
    messages_path = settings.lake.table_path("messages")
    checkpoint = settings.lake.checkpoint_path("ingest-test")
    rng = random.Random(5)
    kills = []
    with open(tmp_path / "job.log", "ab") as log:
        for attempt in range(2):
            with start(conf, "--interval", "200 milliseconds", log=log) as proc:
                seen = delta_versions(messages_path)
                deadline = time.monotonic() + 120
                if attempt % 2 == 0:
                    # Between the Delta commit of batch N and the checkpoint's commits/N.
                    while time.monotonic() < deadline and proc.poll() is None:
                        offsets = cp._numbered(os.path.join(checkpoint, "offsets"))
                        commits = cp._numbered(os.path.join(checkpoint, "commits"))
                        if delta_versions(messages_path) > seen and offsets and offsets[-1] not in commits:
                            break
                        time.sleep(0.002)
                    kills.append("after-delta-commit")
                else:
                    # At a random moment of a micro-batch: once its offsets are logged (decoding,
                    # writing or committing).
                    planned = len(cp._numbered(os.path.join(checkpoint, "offsets")))
                    while time.monotonic() < deadline and proc.poll() is None and \
                            len(cp._numbered(os.path.join(checkpoint, "offsets"))) <= planned:
                        time.sleep(0.02)
                    time.sleep(rng.uniform(0.0, 2.0))
                    kills.append("random")
                assert proc.poll() is None, "the job ended before it could be killed; see job.log"
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # The run after the kills may take bigger batches (a user raising the budget after a
        # crash): the batch logged before the kill is redone with its logged offsets either way,
        # and a dozen more small batches (~4 s each here) would show nothing more.
        final_conf = write_conf(tmp_path, data, "final.yaml", maxBytesPerTrigger=64 << 20)
        final = subprocess.run([sys.executable, "-m", "msglake.pipelines.cli", "ingest", "--conf", final_conf, "--quiet"],
                               stdout=log, stderr=subprocess.STDOUT, timeout=300)
    assert final.returncode == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert kills == ["after-delta-commit", "random"]
    assert_exactly_once(spark, settings, truth)


def test_live_appends_then_sigterm_stops_cleanly(spark, tmp_path):
    data = tmp_path / "nsq"
    data.mkdir()
    conf = write_conf(tmp_path, data)
    settings = make_settings(tmp_path / "lake", data)
    metrics = tmp_path / "metrics.jsonl"
    result = {}
    # A first message, ingested before the live appends start, so they meet a warm job.
    with NsqQueueWriter(str(data), "warmup", 0) as w:
        first = w.put(b"warm", timestamp_ns=time.time_ns())
    # ~15 s of appends: many micro-batches see torn records, fresh segments and new queues.
    writer = threading.Thread(target=lambda: result.setdefault("truth", write_live(str(data), 1500, pause=0.04)))
    with open(tmp_path / "job.log", "ab") as log:
        with start(conf, "--interval", "500 milliseconds", "--metrics-file", str(metrics), log=log) as proc:
            deadline = time.monotonic() + 90
            while not (metrics.exists() and metrics.read_text().strip()):
                assert time.monotonic() < deadline and proc.poll() is None, "the job did not start"
                time.sleep(0.2)
            writer.start()
            writer.join()
            truth = result["truth"]
            truth.messages.append(Expected("warmup", 0, first.segment, first.position, first.virtual_offset, "1",
                                           b"warm", None, None, 5))
            table = settings.lake.table_path("messages")
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                if os.path.isdir(os.path.join(table, "_delta_log")) and \
                        spark.read.format("delta").load(table).count() >= len(truth.messages):
                    break
                time.sleep(2)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
    out = (tmp_path / "job.log").read_text()
    assert rc == 0, out[-3000:]
    assert "SIGTERM received" in out and "every byte of this run is accounted for" in out
    assert_exactly_once(spark, settings, truth)
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) >= 4, "the appends should have spread over several micro-batches"
    assert sum(r["messages"] for r in records) == len(truth.messages)
    assert all({"messagesPerSecond", "bytesPerSecond", "backlog", "quarantined"} <= set(r) for r in records)
    assert records[-1]["backlogBytes"] == 0 and "late.topic/0" in records[-1]["backlog"]


def test_a_segment_deleted_before_it_was_read_is_reported_not_skipped(spark, tmp_path):
    data = tmp_path / "nsq"
    generate(str(data), 600, max_bytes_per_file=1 << 20, bad_inputs=False)
    settings = make_settings(tmp_path / "lake", data)
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    counts = RunCounts()
    sink = DeltaSink("deleted-test", paths["messages"], paths["quarantine"], counts)
    victim = data / "payments" / "payments-0.diskqueue.000000.dat"
    size = victim.stat().st_size

    def write_then_expire(df, batch_id):
        sink(df, batch_id)
        if batch_id == 0:
            victim.unlink()  # retention removes it while most of it is unread

    query = (
        spark.readStream.format("msglake").option("format", "nsq-ext").option("path", str(data))
        .option("maxBytesPerTrigger", 30_000).load()
        .writeStream.foreachBatch(write_then_expire)
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    deleted = [json.loads(p["sources"][0]["endOffset"]).get("deleted") for p in query.recentProgress]
    reported = [d for d in deleted if d]
    assert reported and "payments/payments-0.diskqueue.000000.dat" in reported[0]
    start, end = reported[0]["payments/payments-0.diskqueue.000000.dat"]
    assert end == size and start < size
    lost = spark.read.format("delta").load(paths["quarantine"]).where(F.col("reason").contains("deleted before"))
    [row] = lost.collect()
    assert (row.segment, row.segmentPosition, row.recordLength, row.topic, row.partition) == (
        victim.name, start, size - start, "payments", 0)
