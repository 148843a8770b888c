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


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pipelines.session import build_session

    settings = make_settings(tmp_path_factory.mktemp("lake"))
    session = build_session(settings, app_name="msglake-tests")
    yield session
    session.stop()
