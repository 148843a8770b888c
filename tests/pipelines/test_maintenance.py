"""msglake optimize / vacuum / retention on a small lake: each does what it prints, unsafe values refused."""
from __future__ import annotations

import datetime as dt

import pytest

from msglake.samples.nsq import generate
from msglake.pipelines import cli
from msglake.pipelines.jobs.ingest import ingest
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("maint")
    generate(str(root / "nsq"), 400, bad_inputs=True, max_bytes_per_file=16 << 10)
    settings = make_settings(root / "lake", root / "nsq", maxBytesPerTrigger=32 << 10)  # several small commits
    ingest(spark, settings)
    return settings


def files(spark, path):
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def test_optimize_compacts_and_zorders_messages(spark, lake, capsys):
    path = lake.lake.table_path("messages")
    before_rows, before_files = spark.read.format("delta").load(path).count(), files(spark, path)
    assert cli.main(["optimize", "--lake", lake.lake.root, "--table", "messages", "--table", "quarantine"]) == 0
    assert files(spark, path) < before_files and spark.read.format("delta").load(path).count() == before_rows
    op = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation = 'OPTIMIZE'").first()
    assert op.operationParameters["zOrderBy"] == '["traceId"]'
    out = capsys.readouterr().out
    assert "messages          optimize  Z-ordered by traceId" in out and "quarantine        optimize  compacted" in out


def test_vacuum_refuses_unsafe_retention_unless_forced(spark, lake, capsys):
    assert cli.main(["vacuum", "--lake", lake.lake.root, "--retain-hours", "1"]) == 2
    assert "below 168" in capsys.readouterr().err
    assert cli.main(["vacuum", "--lake", lake.lake.root, "--retain-hours", "168"]) == 0
    assert "deleted 0 unreferenced file(s)" in capsys.readouterr().out   # everything is younger than 7 days
    path = lake.lake.table_path("messages")
    spark.sql(f"OPTIMIZE delta.`{path}`")   # leaves files no current version references
    rows = spark.read.format("delta").load(path).count()
    assert cli.main(["vacuum", "--lake", lake.lake.root, "--retain-hours", "0", "--force", "--table", "messages"]) == 0
    out = capsys.readouterr().out
    assert "deleted 0 " not in out and "messages          vacuum" in out
    assert spark.read.format("delta").load(path).count() == rows
    assert spark.conf.get("spark.databricks.delta.retentionDurationCheck.enabled") == "true"


def test_retention_deletes_rows_older_than_the_cutoff(spark, lake, capsys):
    path = lake.lake.table_path("messages")
    m = spark.read.format("delta").load(path)
    total = m.count()
    # The sample spans 400 ms of store time: keep the last 0.000002 day (172.8 ms) before its newest row.
    newest = m.selectExpr("max(unix_micros(storeTimestamp))").first()[0]
    as_of = dt.datetime.fromtimestamp(newest / 1e6, dt.timezone.utc).isoformat()
    older = m.where(f"unix_micros(storeTimestamp) < {newest - 172_800}").count()
    assert 0 < older < total
    args = ["retention", "--lake", lake.lake.root, "--days", "0.000002", "--as-of", as_of, "--table", "messages"]
    assert cli.main([*args, "--dry-run"]) == 0 and spark.read.format("delta").load(path).count() == total
    assert f"would delete {older:,} row(s)" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert spark.read.format("delta").load(path).count() == total - older
    assert f"deleted {older:,} row(s)" in capsys.readouterr().out
    # Everything is older than 1 day before a time 30 days later.
    assert cli.main(["retention", "--lake", lake.lake.root, "--days", "1", "--as-of", "2026-12-15T00:00:00Z",
                     "--table", "messages"]) == 0
    assert spark.read.format("delta").load(path).count() == 0


def test_a_lake_folder_with_quotes_and_backslashes_in_its_name(spark, tmp_path, capsys):
    # The lake's paths reach Spark inside SQL text (a quoted table name, a string literal): a folder
    # name with quoting characters in it must name that folder, not end the quote. (A backtick is
    # refused by the settings: Delta's own table builder cannot take one, tests/pipelines/test_settings.py.)
    root = tmp_path / "o'lake \"x\" \\y"
    generate(str(tmp_path / "nsq"), 60, max_bytes_per_file=8 << 10)
    settings = make_settings(root, tmp_path / "nsq", maxBytesPerTrigger=4 << 10)
    ingest(spark, settings)
    path = settings.lake.table_path("messages")
    location = spark.sql("DESCRIBE DETAIL messages").first()["location"]
    assert location.removeprefix("file:").rstrip("/") == path
    rows = spark.read.format("delta").load(path).count()
    assert rows > 0
    lake = ["--lake", str(root)]
    assert cli.main(["optimize", *lake, "--table", "messages"]) == 0
    assert cli.main(["vacuum", *lake, "--retain-hours", "168", "--dry-run"]) == 0
    assert cli.main(["retention", *lake, "--days", "1", "--as-of", "2026-12-15T00:00:00Z", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "messages          optimize  Z-ordered by traceId" in out and f"would delete {rows:,} row(s)" in out
    assert spark.read.format("delta").load(path).count() == rows
