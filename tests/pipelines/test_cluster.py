"""The same ingest on a real Spark standalone cluster (a master and a worker on loopback)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import yaml
from chispa import assert_df_equality
from pyspark.sql import functions as F, types as T

from msglake.pipelines import settings as settings_mod
from tests.cluster import start_standalone
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.io.package import build_pyfiles
from msglake.pipelines.session import delta_jars
from tests.conftest import two_broker_settings

pytestmark = pytest.mark.slow

BIN = os.path.dirname(sys.executable)
VOLATILE = {"ingestedAt", "quarantinedAt"}  # when the row was written


def lake_rows(spark, root, table):
    """A table's rows, maps as sorted entry arrays (Spark cannot sort or compare maps)."""
    df = spark.read.format("delta").load(os.path.join(root, table))
    maps = {f.name for f in df.schema.fields if isinstance(f.dataType, T.MapType)}
    return df.select(*[F.array_sort(F.map_entries(c)).alias(c) if c in maps else F.col(c)
                       for c in sorted(df.columns) if c not in VOLATILE])


def test_ingest_on_a_standalone_cluster_equals_local_mode(spark, tmp_path):
    local = two_broker_settings(tmp_path, 800, 400, lake="lake-local")
    conf = tmp_path / "cluster.yaml"
    conf.write_text(yaml.safe_dump(local.model_dump()))
    elsewhere = tmp_path / "elsewhere"  # the jobs must not depend on the driver's working directory
    elsewhere.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}

    cluster = start_standalone(tmp_path / "cluster", workers=1, cores=2, memory="2g")
    try:
        by_cli = subprocess.run(
            [os.path.join(BIN, "msglake"), "ingest", "--source", "nsq", "--conf", str(conf), "--lake",
             str(tmp_path / "lake-cli"), "--master", cluster.master_url, "--quiet"],
            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
        assert by_cli.returncode == 0, by_cli.stdout[-2000:] + by_cli.stderr[-3000:]
        by_submit = subprocess.run(
            [os.path.join(BIN, "spark-submit"), "--master", cluster.master_url, "--py-files", build_pyfiles(),
             "--jars", ",".join(delta_jars(local)), "--conf", "spark.driver.host=127.0.0.1",
             os.path.join(os.path.dirname(settings_mod.__file__), "submit.py"),
             "ingest", "--source", "rmq", "--conf", str(conf), "--lake", str(tmp_path / "lake-submit"), "--quiet"],
            cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
        assert by_submit.returncode == 0, by_submit.stdout[-2000:] + by_submit.stderr[-3000:]
        apps = cluster.status()["completedapps"] + cluster.status()["activeapps"]
    finally:
        cluster.stop()
    assert cluster.alive_groups() == [], "a cluster process outlived the test"

    # Both jobs ran on the cluster's executor, which fetched msglake's code zip. (One worker: a
    # second one gave each job a second executor to start on the machine's two cores, 161 s
    # instead of 122 s for this test, and showed nothing more: every task already runs in a
    # process other than the driver, with only the zip to import msglake from.)
    assert len(apps) == 2 and all(a["cores"] == 2 for a in apps), apps
    for app in apps:
        fetched = glob.glob(str(tmp_path / "cluster" / "worker-*" / app["id"] / "*" / "msglake-*.zip"))
        assert len(fetched) == 1, (app["id"], fetched)

    for source in ("nsq", "rmq"):
        assert ingest(spark, local, source).balanced
    # msglake --master ran the NSQ source, spark-submit the RocketMQ one: each path once, each format
    # once (a source costs ~1 min here; both sources through both paths showed nothing more).
    for out, result, only, tables in (("lake-cli", by_cli, "nsq_ext", ("messages", "quarantine")),
                                      ("lake-submit", by_submit, "rocketmq_commitlog",
                                       ("messages", "quarantine", "consumer_offsets"))):
        assert "every byte of this run is accounted for" in result.stdout
        for table in tables:
            want = lake_rows(spark, tmp_path / "lake-local", table)
            if table != "consumer_offsets":
                want = want.where(F.col("sourceFormat") == only)
            got = lake_rows(spark, tmp_path / out, table)
            assert got.count() == want.count() > 0, (out, table)
            assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
