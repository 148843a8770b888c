"""msglake sql: read-only that holds against an attacker, three output formats, clean errors."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from msglake.errors import QueryError, QueryRefused
from msglake.pipelines import cli
from msglake.pipelines.jobs.demo import QUERIES, SAMPLE
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.jobs.sql import run_sql
from msglake.samples.nsq import generate
from tests.conftest import assert_rows, make_settings, serving

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("sql")
    generate(str(root / "nsq"), 150, bad_inputs=True)
    settings = make_settings(root / "lake", root / "nsq")
    ingest(spark, settings)
    return settings


def lake_digest(root: str) -> dict[str, str]:
    """Every file of the lake and its SHA-256 (Spark's own log file aside: it is not the lake's data)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "_logs"]
        for name in files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return out


#: (statement, what the refusal names). {lake} is the lake root, {out} a folder outside it.
ATTACKS = [
    # writes to paths: the statement that destroyed the quarantine table, and its relatives
    ("INSERT OVERWRITE DIRECTORY '{lake}/quarantine' USING parquet SELECT 1 AS a", "INSERT OVERWRITE DIRECTORY"),
    ("INSERT OVERWRITE LOCAL DIRECTORY '{out}/d' USING parquet SELECT * FROM messages", "INSERT OVERWRITE DIRECTORY"),
    ("insert\n\toverwrite   directory '{out}/d2' using json select 1", "INSERT OVERWRITE DIRECTORY"),
    ("/* just a read */ INSERT OVERWRITE DIRECTORY '{out}/d3' USING csv SELECT 1 -- really", "INSERT OVERWRITE"),
    # direct file relations, at the top, nested and in CTEs
    ("SELECT * FROM text.`/etc/passwd`", "text.`/etc/passwd`"),
    ("SELECT * FROM TEXT.`/etc/passwd`", "`/etc/passwd`"),
    ("SELECT * FROM csv.`/etc/passwd`", "`/etc/passwd`"),
    ("SELECT * FROM json.`{out}`", "json"),
    ("SELECT * FROM binaryFile.`/etc`", "binaryFile"),
    ("SELECT * FROM parquet.`{lake}/messages`", "parquet"),
    ("SELECT count(*) FROM delta.`{lake}/messages`", "delta"),
    ("SELECT * FROM delta.`/tmp`", "delta"),
    ("SELECT * FROM read_files('/etc/passwd')", "read_files"),
    ("SELECT * FROM read_files('/etc/passwd', format => 'text')", "read_files"),
    ("SELECT (SELECT count(*) FROM text.`/etc/passwd`) AS n", "/etc/passwd"),
    ("SELECT * FROM messages WHERE topic IN (SELECT value FROM text.`/etc/passwd`)", "/etc/passwd"),
    ("SELECT * FROM messages m WHERE EXISTS (SELECT 1 FROM (SELECT * FROM text.`/etc/hosts`) t)", "/etc/hosts"),
    ("WITH x AS (SELECT * FROM text.`/etc/passwd`) SELECT * FROM x", "/etc/passwd"),
    ("SELECT * FROM messages UNION ALL SELECT * FROM parquet.`{lake}/messages`", "parquet"),
    ("SELECT * FROM messages WITH ('path' = '/etc')", "read options"),
    ("SELECT * FROM messages |> UNION ALL (SELECT * FROM text.`/etc/passwd`)", "/etc/passwd"),
    ("SELECT * FROM IDENTIFIER('text.`/etc/passwd`')", "/etc/passwd"),
    ("SELECT * FROM nosuchdb.messages", "nosuchdb.messages"),
    # expressions that reach outside SQL
    ("SELECT java_method('java.lang.System', 'getProperty', 'user.name')", "java_method"),
    ("SELECT reflect('java.lang.System', 'getenv', 'HOME')", "reflect"),
    ("SELECT ReFlEcT('java.lang.System', 'getenv', 'HOME')", "reflect"),
    ("SELECT try_reflect('java.lang.System', 'getenv', 'HOME')", "try_reflect"),
    ("SELECT topic FROM messages WHERE java_method('java.lang.System', 'exit', 0) IS NULL", "java_method"),
    ("SELECT (SELECT reflect('java.lang.Runtime', 'getRuntime')) AS r", "reflect"),
    ("SELECT transform(array(1), x -> reflect('java.lang.System', 'getenv', 'HOME'))", "reflect"),
    ("CREATE FUNCTION f AS 'java.lang.String'", "CREATE FUNCTION"),
    ("CREATE TEMPORARY FUNCTION f AS 'org.apache.hadoop.hive.ql.udf.UDFPI'", "CREATE FUNCTION"),
    # writes to the lake's tables, plain and dressed up
    ("RESTORE TABLE messages TO VERSION AS OF 0", "RESTORE"),
    ("DELETE FROM messages", "DELETE"),
    ("  dElEtE\n FROM messages -- comment", "DELETE"),
    ("WITH x AS (SELECT 1) DELETE FROM messages", "DELETE"),
    ("WITH x AS (SELECT 1) UPDATE messages SET priority = 1", "UPDATE"),
    ("WITH x AS (SELECT * FROM messages) MERGE INTO messages t USING x s ON t.messageId = s.messageId "
     "WHEN MATCHED THEN DELETE", "MERGE"),
    ("WITH x AS (SELECT * FROM messages) INSERT INTO messages SELECT * FROM x", "INSERT"),
    ("FROM (SELECT * FROM messages) s INSERT INTO messages SELECT * INSERT INTO messages SELECT *", "INSERT"),
    ("INSERT INTO messages TABLE messages", "INSERT"),
    ("EXECUTE IMMEDIATE 'DELETE FROM messages'", "EXECUTE IMMEDIATE"),
    ("EXECUTE IMMEDIATE 'SELECT * FROM text.`/etc/passwd`'", "EXECUTE IMMEDIATE"),
    ("CREATE TABLE c SHALLOW CLONE messages LOCATION '{out}/clone'", "CLONE"),
    ("CREATE TABLE t2 AS SELECT * FROM messages", "CREATE TABLE ... AS SELECT"),
    ("CREATE TABLE t3 USING parquet LOCATION '{out}/t3' AS SELECT 1 AS a", "CREATE TABLE ... AS SELECT"),
    ("CREATE TABLE t4 (a INT) USING delta LOCATION '{lake}/quarantine'", "CREATE TABLE"),
    ("DROP TABLE messages", "DROP TABLE"),
    ("TRUNCATE TABLE quarantine", "TRUNCATE"),
    ("ALTER TABLE messages ADD COLUMNS (x INT)", "ALTER"),
    ("OPTIMIZE messages", "OPTIMIZE"),
    ("VACUUM messages RETAIN 0 HOURS", "VACUUM"),
    ("CONVERT TO DELTA parquet.`{out}`", "CONVERT"),
    ("CACHE TABLE messages", "CACHE TABLE"),
    ("CACHE TABLE leak AS SELECT * FROM text.`/etc/passwd`", "CACHE TABLE"),
    ("UNCACHE TABLE messages", "UNCACHE"),
    ("REFRESH TABLE messages", "REFRESH"),
    ("ADD JAR '{out}/x.jar'", "ADD JAR"),
    ("ADD FILE '/etc/passwd'", "ADD FILE"),
    ("SET spark.sql.runSQLOnFiles = true", "SET"),
    ("RESET", "RESET"),
    # views and scripts
    ("CREATE VIEW v AS SELECT * FROM text.`/etc/passwd`", "CREATE VIEW"),
    ("CREATE TEMPORARY VIEW v USING text OPTIONS (path '/etc/passwd')", "CREATE VIEW"),
    ("CREATE OR REPLACE TEMPORARY VIEW v_messages AS SELECT 1 AS a", "CREATE VIEW"),
    ("BEGIN DELETE FROM messages; END", ""),
    ("SELECT 1; DROP TABLE messages", "more than one statement"),
    ("SELECT 1 ; DELETE FROM messages ;", "more than one statement"),
    # EXPLAIN and DESCRIBE of what is refused
    ("EXPLAIN INSERT INTO messages SELECT * FROM messages", "INSERT"),
    ("EXPLAIN EXTENDED DELETE FROM messages", "DELETE"),
    ("EXPLAIN SELECT * FROM text.`/etc/passwd`", "/etc/passwd"),
    ("DESCRIBE QUERY SELECT * FROM text.`/etc/passwd`", "/etc/passwd"),
    ("DESCRIBE delta.`{lake}/messages`", "delta"),
    ("DESCRIBE DETAIL '{lake}/messages'", "delta"),
]


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    return tmp_path_factory.mktemp("outside")


@pytest.mark.parametrize(("statement", "names"), ATTACKS, ids=[f"attack{i:02d}" for i in range(len(ATTACKS))])
def test_read_only_refuses_what_is_not_a_read_of_the_lake(lake, outside, capsys, statement, names):
    root = lake.lake.root
    sql = statement.format(lake=root, out=outside)
    before, outside_before = lake_digest(root), sorted(os.listdir(outside))
    assert cli.main(["sql", sql, "--lake", root]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("msglake: error: refused") and len(err.splitlines()) == 1, err
    assert names.lower() in err.lower(), err
    assert lake_digest(root) == before
    assert sorted(os.listdir(outside)) == outside_before


def test_the_attack_list_is_long_enough():
    assert len(ATTACKS) >= 40


def _legit_queries() -> list[str]:
    """The queries a user is shown: the README's `msglake sql` lines, the notebooks' spark.sql
    statements (those without Python placeholders) and the demo's."""
    readme = (REPO / "README.md").read_text()
    found = re.findall(r'msglake sql "([^"]+)"', readme)
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            source = "".join(cell["source"])
            found += [q for q in re.findall(r'spark\.sql\(f?"""(.*?)"""\)', source, re.S) if "{" not in q]
    found += [sql for _, sql in QUERIES] + [SAMPLE]
    return found


def test_the_queries_users_are_shown_still_answer(spark, replayed, capsys):
    settings = replayed[0]
    queries = _legit_queries() + [
        "SELECT count(*) FROM messages VERSION AS OF 0", "SELECT count(*) FROM v_messages",
        "DESCRIBE messages", "DESCRIBE TABLE EXTENDED quarantine", "SHOW TABLES", "SHOW VIEWS",
        "SHOW COLUMNS IN messages", "SHOW TBLPROPERTIES messages", "DESCRIBE HISTORY messages",
        "DESCRIBE DETAIL messages", "EXPLAIN SELECT * FROM v_trace WHERE traceId = 'x'", "VALUES (1, 'a'), (2, 'b')",
        "SELECT * FROM range(3)", "SELECT explode(array(1, 2))", "TABLE default.consumer_offsets",
        "SELECT /*+ BROADCAST(q) */ m.topic FROM messages m JOIN quarantine q ON m.topic = q.topic LIMIT 1",
        "WITH t AS (SELECT topic FROM v_messages) SELECT count(*) FROM t",
        "SELECT topic FROM messages INTERSECT SELECT topic FROM spark_catalog.default.quarantine",
        "DESCRIBE QUERY SELECT topic FROM messages",
    ]
    assert len(queries) >= 20
    for sql in queries:
        assert cli.main(["sql", sql, "--lake", settings.lake.root, "--limit", "3"]) == 0, (sql, capsys.readouterr().err)
        out = capsys.readouterr()
        assert out.out and not out.err, (sql, out.err)


def test_writes_run_with_allow_writes_only(spark, lake):
    from msglake.pipelines.io.catalog import register_tables

    # The shared session's table names point at the lake a test opened last: make it this one,
    # or the DELETE below would hit another test's lake.
    register_tables(spark, lake)
    assert spark.sql("DESCRIBE DETAIL messages").first()["location"].endswith(lake.lake.table_path("messages"))
    before = spark.table("messages").count()
    with pytest.raises(QueryRefused, match="refused in read-only mode: DELETE"):
        run_sql(spark, "DELETE FROM messages WHERE true")
    assert spark.table("messages").count() == before
    run_sql(spark, "DELETE FROM messages WHERE topic = 'audit.log-v2'", allow_writes=True)
    assert 0 < spark.table("messages").count() < before
    run_sql(spark, "OPTIMIZE messages", allow_writes=True)


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


def test_json_writes_binary_as_plain_base64(lake, capsys):
    assert cli.main(["sql", "SELECT body FROM messages ORDER BY bodySize DESC LIMIT 1", "--lake", lake.lake.root,
                     "--format", "json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    text = json.loads(line)["body"]
    assert len(text) > 76 and "\n" not in text and "\r" not in text
    assert base64.b64decode(text, validate=True)


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT nope FROM messages", "SQL error: UNRESOLVED_COLUMN"),
    ("SELEC 1", "SQL error: PARSE_SYNTAX_ERROR"),
    ("SELECT * FROM no_such_table", "SQL error: TABLE_OR_VIEW_NOT_FOUND"),
])
def test_sql_errors_are_one_line_exit_2(lake, capsys, sql, message):
    assert cli.main(["sql", sql, "--lake", lake.lake.root]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"msglake: error: {message}") and len(err.splitlines()) == 1 and len(err) > 40, err


def test_run_sql_raises_msglake_errors(spark, lake):
    with pytest.raises(QueryError, match="UNRESOLVED_COLUMN"):
        run_sql(spark, "SELECT nope FROM messages")


# -- the query server: a real Flight SQL client (ADBC) and msglake sql through it --------------------

@pytest.fixture(scope="module")
def server(spark, lake):
    """`msglake serve` of the attack lake, in this process (the session is shared), until the module ends."""
    with serving(spark, lake) as s:
        yield s


def test_the_server_answers_a_flight_sql_client(spark, lake, server):
    import adbc_driver_flightsql.dbapi as flight_sql

    query = "SELECT topic, count(*) AS n, max(storeTimestamp) AS last FROM messages GROUP BY topic ORDER BY topic"
    with flight_sql.connect(f"grpc://127.0.0.1:{server.port}", autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query)
        got = cur.fetch_arrow_table()
        cur.execute("SELECT * FROM v_trace LIMIT 5")
        assert cur.fetch_arrow_table().num_rows > 0
    assert_rows(spark.sql(query), [tuple(r.values()) for r in got.to_pylist()])


@pytest.mark.parametrize(("statement", "names"), ATTACKS, ids=[f"attack{i:02d}" for i in range(len(ATTACKS))])
def test_the_server_refuses_the_same_attacks(lake, outside, server, statement, names):
    import adbc_driver_flightsql.dbapi as flight_sql

    root = lake.lake.root
    before, outside_before = lake_digest(root), sorted(os.listdir(outside))
    with flight_sql.connect(f"grpc://127.0.0.1:{server.port}", autocommit=True) as conn, conn.cursor() as cur:
        with pytest.raises(Exception, match="(?i)refused") as refused:
            cur.execute(statement.format(lake=root, out=outside))
            cur.fetch_arrow_table()
    assert names.lower() in str(refused.value).lower()
    assert lake_digest(root) == before
    assert sorted(os.listdir(outside)) == outside_before


def test_msglake_sql_uses_the_running_server(lake, server, capsys):
    root = lake.lake.root
    assert json.loads(Path(root, "_server.json").read_text())["uri"] == f"grpc://127.0.0.1:{server.port}"
    query = "SELECT topic, count(*) AS n FROM messages GROUP BY topic ORDER BY topic"
    served = server.statements
    assert cli.main(["sql", query, "--lake", root, "--format", "csv"]) == 0
    through_server = capsys.readouterr().out
    assert server.statements == served + 1
    assert cli.main(["sql", query, "--lake", root, "--format", "csv", "--in-process"]) == 0
    assert capsys.readouterr().out == through_server
    assert cli.main(["sql", "DROP TABLE messages", "--lake", root]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msglake: error: refused") and len(err.strip().splitlines()) == 1
