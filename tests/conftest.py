"""One SparkSession for the whole run (it costs ~4 s to start); lakes live under tmp_path."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from msglake.pipelines import settings as settings_mod


def make_settings(lake_root, source_path=None, fmt: str = "nsq-ext", source: dict | None = None,
                  **ingest) -> settings_mod.Settings:
    """Settings of the committed default, with the lake (and one source) moved to test folders."""
    doc = settings_mod.from_dict(settings_mod.default_document()).model_dump()
    doc["lake"]["root"] = str(lake_root)
    doc["spark"]["conf"]["spark.sql.shuffle.partitions"] = "2"
    if source_path is not None:
        options = {"storeHost": "10.0.0.7:4150"} if fmt == "nsq-ext" else {}
        doc["sources"] = [{"name": "test", "format": fmt, "path": str(source_path), **options, **(source or {})}]
    doc["ingest"].update(ingest)
    return settings_mod.from_dict(doc, "test settings")


def two_broker_settings(tmp_path, nsq_messages: int, rocketmq_messages: int, lake: str = "lake",
                        rocketmq_path: str = "store") -> settings_mod.Settings:
    """Sample NSQ data (``tmp_path/nsq``) and a RocketMQ store, as sources ``nsq`` and ``rmq`` of one lake."""
    from msglake.samples.nsq import generate as generate_nsq
    from msglake.samples.rocketmq import generate as generate_rocketmq

    generate_nsq(str(tmp_path / "nsq"), nsq_messages, max_bytes_per_file=64 << 10)
    generate_rocketmq(str(tmp_path / "store"), rocketmq_messages, file_size=64 << 10)
    doc = make_settings(tmp_path / lake).model_dump()
    doc["sources"] = [
        {"name": "nsq", "format": "nsq-ext", "path": str(tmp_path / "nsq"), "storeHost": "10.0.0.1:4150"},
        {"name": "rmq", "format": "rocketmq-commitlog", "path": str(tmp_path / rocketmq_path)},
    ]
    return settings_mod.from_dict(doc, "test settings")


def assert_rows(actual, expected_rows, ignore_row_order: bool = False) -> None:
    """chispa's DataFrame equality of ``actual`` against rows written in Python, read in ``actual``'s
    schema (so a test states values, not Spark types)."""
    from chispa import assert_df_equality

    expected = actual.sparkSession.createDataFrame(expected_rows, actual.schema)
    assert_df_equality(actual, expected, ignore_nullable=True, ignore_row_order=ignore_row_order)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from msglake.pipelines.session import build_session

    settings = make_settings(tmp_path_factory.mktemp("lake"))
    # One session runs the whole suite, so its driver (local mode: the executor too) holds what
    # every test left cached, checkpointed or broadcast until the JVM collects it. With the
    # settings' 2g it ran out in 1 of 3 clean-clone runs (2026-11-26: GC-bound semantics-stream
    # tests 5-10x slower, then "Not enough memory to build and broadcast"); this machine has 24 GiB.
    settings.spark.conf["spark.driver.memory"] = "4g"
    session = build_session(settings, app_name="msglake-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def replayed(spark, tmp_path_factory):
    """A demo-shaped lake shared by the tests that read one (views, quality reports, notebooks): both
    sample brokers ingested, two consumer events loaded (twice), replayed (twice) at one T.

    Returns (settings, the acked message id, the settings file)."""
    import datetime as dt
    import json

    from msglake.pipelines import cli
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.jobs.replay import load_events_table

    tmp_path = tmp_path_factory.mktemp("replayed")
    settings = two_broker_settings(tmp_path, 300, 200)
    doc = settings.model_dump()
    doc["policies"] = {"orders": {"messageTtlMs": 60_000, "deadLetterTopic": "orders.dlq"}, "orders.dlq": {}}
    settings = settings_mod.from_dict(doc, "test")
    for src in settings.sources:
        ingest(spark, settings, src.name)
    conf = tmp_path / "conf.yaml"
    conf.write_text(json.dumps(doc))
    first = spark.sql(f"SELECT messageId, uniqueId, partition, unix_micros(storeTimestamp) AS us FROM delta.`{settings.lake.table_path('messages')}` "
                      "WHERE topic = 'orders' AND NOT coalesce(systemCopy, false) AND retryOf IS NULL "
                      "ORDER BY storeTimestamp, messageId LIMIT 1").first()
    acked = first["uniqueId"] or first["messageId"]
    events = tmp_path / "ev.jsonl"
    ack = dt.datetime.fromtimestamp(first["us"] / 1e6 + 1, dt.timezone.utc).isoformat()
    # NSQ numbers ids per partition: the event says which partition it read
    named = {"topic": "orders", "messageId": acked, "partition": first["partition"], "time": ack}
    events.write_text(json.dumps({**named, "event": "acked"}) + "\n" + json.dumps({**named, "event": "delivered"}) + "\n")
    assert cli.main(["load-events", "--conf", str(conf), str(events)]) == 0
    assert load_events_table(spark, settings, [str(events)])[1] == 0   # nothing added twice
    for _ in range(2):  # the same T again replaces its rows
        assert cli.main(["replay", "--conf", str(conf), "--as-of", "2100-01-01T00:00:00Z"]) == 0
    return settings, acked, conf


@contextmanager
def serving(spark, settings):
    """`msglake serve` of ``settings``' lake in this process (the session is shared), in a thread,
    until the block ends; yields the server."""
    import threading

    from msglake.pipelines.jobs.serve import serve

    started = threading.Event()
    holder = {}

    def ready(s):
        holder["server"] = s
        started.set()

    thread = threading.Thread(target=serve, args=(spark, settings, 0, ready), daemon=True)
    thread.start()
    assert started.wait(60)
    try:
        yield holder["server"]
    finally:
        holder["server"].shutdown()
        thread.join(30)
