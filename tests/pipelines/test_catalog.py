"""The session catalog's names for the lake's tables, and the tables' properties."""
from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import json

import pytest
from pyspark.sql import functions as F

from msglake.pipelines.io.catalog import add_missing_properties, ensure_table
from msglake.schemas import MESSAGES_TABLE
from msglake.schemas.semantics import MESSAGE_EVENTS_TABLE, MESSAGE_STATES_TABLE
from msglake.schemas.tables import STATS_COLUMNS, stats_columns
from tests.conftest import make_settings


def test_a_name_follows_the_lake_that_last_ensured_its_table(spark, tmp_path):
    for lake in ("a", "b", "a"):
        path = ensure_table(spark, make_settings(tmp_path / lake), MESSAGES_TABLE)
        location = spark.sql("DESCRIBE DETAIL messages").first()["location"]
        assert location.removeprefix("file:").rstrip("/") == path.rstrip("/")


def _properties(spark, path) -> dict[str, str]:
    return {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}


def test_a_table_an_older_msglake_made_gets_the_new_properties_and_keeps_its_owners(spark, tmp_path):
    settings = make_settings(tmp_path / "lake")
    older = dataclasses.replace(MESSAGE_STATES_TABLE, properties={})
    path = ensure_table(spark, settings, older)
    assert STATS_COLUMNS not in _properties(spark, path)
    ensure_table(spark, settings, MESSAGE_STATES_TABLE)
    assert _properties(spark, path)[STATS_COLUMNS] == MESSAGE_STATES_TABLE.properties[STATS_COLUMNS]

    # A property the table's owner set is theirs: not reset to msglake's value.
    events = ensure_table(spark, settings, dataclasses.replace(MESSAGE_EVENTS_TABLE, properties={}))
    spark.sql(f"ALTER TABLE delta.`{events}` SET TBLPROPERTIES ('{STATS_COLUMNS}' = 'rowId')")
    ensure_table(spark, settings, MESSAGE_EVENTS_TABLE)
    props = _properties(spark, events)
    assert props[STATS_COLUMNS] == "rowId"
    assert props["delta.checkpointInterval"] == MESSAGE_EVENTS_TABLE.properties["delta.checkpointInterval"]


def test_files_record_statistics_of_the_named_columns_only(spark, tmp_path):
    path = ensure_table(spark, make_settings(tmp_path / "lake"), MESSAGE_EVENTS_TABLE)
    row = ("r1", "u1", 0, "orders", 0, "stored", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), 0, "ready", None)
    (spark.createDataFrame([row], "rowId string, uniqueId string, hop int, topic string, partition int, "
                                  "event string, time timestamp, seq int, state string, reason string")
     .withColumn("asOf", F.lit(None).cast("timestamp")).write.format("delta").mode("append").save(path))
    actions = [json.loads(line) for f in sorted(glob.glob(f"{path}/_delta_log/*.json")) for line in open(f)]
    adds = [a["add"] for a in actions if "add" in a]
    stats = json.loads(adds[-1]["stats"])
    assert set(stats["nullCount"]) == {"asOf", "rowId", "uniqueId", "time"}
    assert stats["minValues"]["rowId"] == "r1"


def test_a_table_spec_refuses_statistics_of_a_column_it_does_not_have():
    with pytest.raises(ValueError, match=r"unknown columns \['nope'\]"):
        dataclasses.replace(MESSAGE_EVENTS_TABLE, properties=stats_columns("rowId", "nope"))


def test_the_semantics_jobs_own_tables_made_by_an_older_msglake_get_their_list(spark, tmp_path):
    from msglake.pipelines.jobs.semantics import PENDING_STATS

    path = str(tmp_path / "semantics-pending")
    rows = spark.createDataFrame([("copy", "r1", "u1", 5)], "kind string, rowId string, uniqueId string, x int") \
        .withColumn("dueAt", F.current_timestamp()).withColumn("storeTimestamp", F.current_timestamp())
    rows.write.format("delta").save(path)
    add_missing_properties(spark, path, PENDING_STATS)
    assert _properties(spark, path)[STATS_COLUMNS] == PENDING_STATS[STATS_COLUMNS]
    add_missing_properties(spark, path, PENDING_STATS)  # set already: no second commit
    assert len(glob.glob(f"{path}/_delta_log/*.json")) == 2
