"""One SparkSession for the whole run (it costs ~4 s to start); lakes live under tmp_path."""
from __future__ import annotations

import pytest

from pipelines import settings as settings_mod


def make_settings(lake_root, source_path=None, fmt: str = "nsq-ext", source: dict | None = None,
                  **ingest) -> settings_mod.Settings:
    """Settings of the committed default, with the lake (and one source) moved to test folders."""
    base = settings_mod.load(settings_mod.DEFAULT_CONF, env={})
    doc = base.model_dump()
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
    from formats.nsq_samples import generate as generate_nsq
    from formats.rocketmq_samples import generate as generate_rocketmq

    generate_nsq(str(tmp_path / "nsq"), nsq_messages, max_bytes_per_file=64 << 10)
    generate_rocketmq(str(tmp_path / "store"), rocketmq_messages, file_size=64 << 10)
    doc = make_settings(tmp_path / lake).model_dump()
    doc["sources"] = [
        {"name": "nsq", "format": "nsq-ext", "path": str(tmp_path / "nsq"), "storeHost": "10.0.0.1:4150"},
        {"name": "rmq", "format": "rocketmq-commitlog", "path": str(tmp_path / rocketmq_path)},
    ]
    return settings_mod.from_dict(doc, "test settings")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pipelines.session import build_session

    settings = make_settings(tmp_path_factory.mktemp("lake"))
    session = build_session(settings, app_name="msglake-tests")
    yield session
    session.stop()
