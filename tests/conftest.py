"""One SparkSession per test process (it costs ~4 s to start; `make test` runs a process per pytest-xdist
worker); lakes live under tmp_path."""
from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

from msglake.pipelines import settings as settings_mod

# The JVMs the tests start (jobs through the CLI, spark-submit, clusters, notebooks: they inherit
# this variable) compile with C1 only: their data is small and each lives a minute or two, so C2's
# compilations never pay back, and on two cores shared by two workers CPU is the suite's time.
# Measured in a two-worker run: the standalone-cluster test 322 -> 166 s, test_stream.py's three
# 311 -> 142 s, the wheel's demo 226 -> 134 s. The workers' own sessions (``spark`` below) run the
# whole suite and keep C2: with C1 they were slower. The JIT tier does not change what a job
# computes. (Each JVM says "Picked up JAVA_TOOL_OPTIONS" on its stderr, which msglake's session
# sends to its log file.)
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
if TEST_JVM_OPTIONS not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {TEST_JVM_OPTIONS}".strip()

#: The files whose tests read the session's shared replayed lake (the ``replayed`` fixture, ~80 s to
#: build alone, ~180 s beside another worker): on pytest-xdist's workers they run as one group, so
#: the lake is built once, on one worker, instead of on each. (Collection fails if a test elsewhere
#: takes the fixture.)
REPLAYED_FILES = ("tests/pipelines/test_sql.py", "tests/pipelines/test_quality_report.py",
                  "tests/pipelines/test_replay.py", "tests/pipelines/test_history.py", "tests/test_notebooks.py")

#: The suite's longest groups of tests and their worker-seconds in a two-worker run (2026-11-28, this
#: 2-core machine kind, the JVMs the tests start on C1 as set above). `make test` hands groups to
#: its workers longest first, so that no long group starts last while the other worker idles. A
#: hint only: the groups not named here come after these, those with the most tests first
#: (pytest-xdist's own order).
LONG_GROUPS = {
    "replayed": 800, "tests/pipelines/test_semantics_stream.py": 510, "tests/pipelines/test_ingest.py": 180,
    "tests/pipelines/test_cluster.py": 166, "tests/pipelines/test_stream.py": 142, "tests/test_wheel.py": 134,
    "tests/pipelines/test_maintenance.py": 95, "tests/pipelines/test_rocketmq_ingest.py": 90,
    "tests/pipelines/test_once.py": 68, "tests/transforms/test_lifecycle.py": 68, "tests/test_cli.py": 52,
}


def pytest_collection_modifyitems(config, items):
    stray = sorted({item.nodeid.split("::")[0] for item in items if "replayed" in item.fixturenames}
                   - set(REPLAYED_FILES))
    if stray:
        raise pytest.UsageError(f"{', '.join(stray)} use the replayed fixture: add them to REPLAYED_FILES in tests/conftest.py")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: pytest without xdist runs as well
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (what `make test` passes): a file's tests on one worker, as pytest-xdist does,
    with the REPLAYED_FILES as one group and the LONG_GROUPS handed out first."""
    # (Not xdist's own loadgroup: with pytest 9.2 it ignores the groups, pytest-dev/pytest-xdist#1386.
    # The two methods below are xdist 3's own, hence the pin below 4 in pyproject.toml.)
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "replayed" if path in REPLAYED_FILES else path

        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda scope: LONG_GROUPS.get(scope, 0))  # the first of equals
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: pytest without xdist runs as well
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core, as many as memory holds (each runs a SparkSession with a 4 GiB
    driver, and its tests start more JVMs)."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) >> 20
    except (OSError, StopIteration, ValueError):
        available = 8
    return max(1, min(os.cpu_count() or 1, available // 8))


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


@contextmanager
def _own_jit():
    """The worker's session JVM started without :data:`TEST_JVM_OPTIONS` (C2 pays back over a run)."""
    given = os.environ.get("JAVA_TOOL_OPTIONS", "")
    own = given.replace(TEST_JVM_OPTIONS, "").strip()
    if own:
        os.environ["JAVA_TOOL_OPTIONS"] = own
    else:
        os.environ.pop("JAVA_TOOL_OPTIONS", None)
    try:
        yield
    finally:
        os.environ["JAVA_TOOL_OPTIONS"] = given


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from msglake.pipelines.session import build_session

    settings = make_settings(tmp_path_factory.mktemp("lake"))
    # One session runs the whole suite, so its driver (local mode: the executor too) holds what
    # every test left cached, checkpointed or broadcast until the JVM collects it. With the
    # settings' 2g it ran out in 1 of 3 clean-clone runs (2026-11-26: GC-bound semantics-stream
    # tests 5-10x slower, then "Not enough memory to build and broadcast"); this machine has 24 GiB.
    settings.spark.conf["spark.driver.memory"] = "4g"
    with _own_jit():
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
