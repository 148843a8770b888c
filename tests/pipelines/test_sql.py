"""msglake sql: read-only by default, three output formats, clean errors."""
from __future__ import annotations

import csv
import io
import json

import pytest

from msglake.errors import QueryRefused
from msglake.samples.nsq import generate
from msglake.pipelines import cli
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.jobs.sql import QueryRefused, run_sql, statement
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("sql")
    generate(str(root / "nsq"), 150, bad_inputs=True)
    settings = make_settings(root / "lake", root / "nsq")
    ingest(spark, settings)
    return settings


@pytest.mark.parametrize(("sql", "writes"), [
    ("SELECT 1", False), ("WITH a AS (SELECT 1 AS x) SELECT x FROM a", False), ("SHOW TABLES", False),
    ("DESCRIBE messages", False), ("EXPLAIN SELECT * FROM messages", False),
    ("INSERT INTO messages SELECT * FROM messages", True), ("DELETE FROM messages WHERE true", True),
    ("DROP TABLE messages", True), ("CREATE TABLE x (a INT)", True), ("OPTIMIZE messages", True),
    ("VACUUM messages", True), ("UPDATE messages SET priority = 1", True),
])
def test_statements_that_write_are_recognised_before_running(spark, sql, writes):
    assert statement(spark, sql)[1] is writes


def test_writes_are_refused_unless_allowed(spark, lake):
    before = spark.table("messages").count()
    with pytest.raises(QueryRefused, match="DeleteFromTable can change the lake"):
        run_sql(spark, "DELETE FROM messages WHERE true")
    assert spark.table("messages").count() == before
    run_sql(spark, "DELETE FROM messages WHERE topic = 'audit.log-v2'", allow_writes=True)
    assert 0 < spark.table("messages").count() < before


def test_the_command_prints_table_json_and_csv(lake, capsys):
    query = "SELECT topic, count(*) AS n, max(body) AS body, first(keys) AS k FROM messages GROUP BY topic ORDER BY topic"
    base = ["sql", query, "--lake", lake.lake.root]
    assert cli.main([*base, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows and {"topic", "n", "body", "k"} == set(rows[0]) and isinstance(rows[0]["n"], int)
    assert cli.main([*base, "--format", "csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == ["topic", "n", "body", "k"] and len(table) == len(rows) + 1
    assert cli.main([*base]) == 0
    out = capsys.readouterr().out
    assert "|topic" in out and rows[0]["topic"] in out


def test_errors_exit_2_with_a_message(lake, capsys):
    assert cli.main(["sql", "DROP TABLE messages", "--lake", lake.lake.root]) == 2
    assert "refused" in capsys.readouterr().err
    assert cli.main(["sql", "SELECT nope FROM messages", "--lake", lake.lake.root]) == 2
    assert "SQL error" in capsys.readouterr().err
