"""The session catalog's names for the lake's tables."""
from __future__ import annotations

from msglake.pipelines.io.catalog import ensure_table
from msglake.schemas import MESSAGES_TABLE
from tests.conftest import make_settings


def test_a_name_follows_the_lake_that_last_ensured_its_table(spark, tmp_path):
    for lake in ("a", "b", "a"):
        path = ensure_table(spark, make_settings(tmp_path / lake), MESSAGES_TABLE)
        location = spark.sql("DESCRIBE DETAIL messages").first()["location"]
        assert location.removeprefix("file:").rstrip("/") == path.rstrip("/")
