"""The msglake command as a user runs it (a real subprocess; these never start Spark)."""
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
