"""The msglake command as a user runs it: a real subprocess, its exit status and what reaches the terminal."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # subprocesses: not in `make test-fast`


def msglake(*args, **kw):
    return subprocess.run([sys.executable, "-m", "msglake.pipelines.cli", *args], capture_output=True, text=True, **kw)


@pytest.mark.parametrize("command", [[], ["ingest"], ["demo"], ["generate"]])
def test_help_explains_every_option(command):
    r = msglake(*command, "--help")
    assert r.returncode == 0
    for word in {(): ["ingest", "demo", "generate"], ("ingest",): ["--source", "--conf", "--master", "--lake"],
                 ("demo",): ["--messages", "--fresh"], ("generate",): ["--segment-bytes", "--seed", "--format"]}[tuple(command)]:
        assert word in r.stdout


def test_bad_settings_fail_fast_naming_the_key(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("lake: {root: 3}\nsources: []\n")
    r = msglake("ingest", "--conf", str(conf))
    assert r.returncode == 2
    assert "lake.root: Input should be a valid string" in r.stderr and "Traceback" not in r.stderr


def test_unknown_source_name(tmp_path):
    r = msglake("ingest", "--source", "nope")
    assert r.returncode == 2 and "no source named 'nope'" in r.stderr


def test_generate_writes_real_segments(tmp_path):
    r = msglake("generate", str(tmp_path / "nsq"), "--messages", "200", "--segment-bytes", "20000", "--no-bad-inputs")
    assert r.returncode == 0, r.stderr
    assert "wrote 200 messages" in r.stdout
    assert (tmp_path / "nsq" / "orders" / "orders-0.diskqueue.000000.dat").exists()


def test_generate_writes_a_rocketmq_store(tmp_path):
    r = msglake("generate", str(tmp_path / "store"), "--format", "rocketmq-commitlog", "--messages", "300",
                "--segment-bytes", "65536")
    assert r.returncode == 0, r.stderr
    first = tmp_path / "store" / "commitlog" / "00000000000000000000"
    assert first.stat().st_size == 65536 and "corrupt records" in r.stdout
    assert (tmp_path / "store" / "config" / "consumerOffset.json").exists()


def test_spark_output_stays_off_the_terminal(tmp_path):
    """One Spark start for three things a new user meets: an empty source folder ingested, a query, a
    failing query. The terminal gets msglake's lines only; Spark's own go to <lake>/_logs/spark.log."""
    empty = tmp_path / "empty"
    empty.mkdir()
    conf = tmp_path / "c.yaml"
    conf.write_text(f"sources: [{{name: s, format: nsq-ext, path: '{empty}'}}]\n")
    lake = str(tmp_path / "lake")
    r = msglake("ingest", "--conf", str(conf), "--lake", lake)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "decoded                 0 messages" in r.stdout and "every byte of this run is accounted for" in r.stdout
    assert "WARN" in (tmp_path / "lake" / "_logs" / "spark.log").read_text()  # the ingest's own Spark output
    r = msglake("sql", "SELECT count(*) AS n FROM messages", "--lake", lake, "--format", "csv")
    assert (r.returncode, r.stdout, r.stderr) == (0, "n\n0\n", "")
    r = msglake("sql", "SELECT nope FROM messages", "--lake", lake)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("msglake: error: SQL error: UNRESOLVED_COLUMN") and r.stderr.count("\n") == 1, r.stderr
    log = (tmp_path / "lake" / "_logs" / "spark.log").read_text()
    assert "WARN" in log or "WARNING" in log


def test_unusable_folders_fail_in_one_line_before_spark_starts(tmp_path):
    """Checked before any JVM starts (these return in well under Spark's start time) and before
    anything is written. (A read-only lake cannot be made for root, who runs the tests.)"""
    not_a_folder = tmp_path / "afile"
    not_a_folder.write_text("x")
    source = tmp_path / "nsq"
    source.mkdir()
    conf = tmp_path / "c.yaml"
    conf.write_text(f"sources: [{{name: s, format: nsq-ext, path: '{source}'}}]\n")
    missing = tmp_path / "m.yaml"
    missing.write_text(f"sources: [{{name: s, format: nsq-ext, path: '{tmp_path / 'gone'}'}}]\n")
    lake = tmp_path / "lake"
    cases = [
        (["ingest", "--conf", str(conf), "--lake", str(not_a_folder)], "is a file, not a folder"),
        (["stream", "--conf", str(conf), "--lake", str(not_a_folder), "--available-now"], "is a file, not a folder"),
        (["quality", "--lake", str(not_a_folder)], "is a file, not a folder"),
        (["serve", "--lake", str(not_a_folder)], "is a file, not a folder"),
        (["ingest", "--conf", str(missing), "--lake", str(lake)], "does not exist"),
        (["quality", "--lake", str(lake)], "table messages not found"),
        (["sql", "SELECT 1", "--limit", "0"], "--limit"),
    ]
    for args, message in cases:
        r = msglake(*args, timeout=30)
        assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    assert not_a_folder.read_text() == "x" and not lake.exists()
