"""The driver class archive made by `make setup` (msglake.pipelines.class_archive): local drivers map it,
and one that does not fit this JVM is ignored without a word on the terminal."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from msglake.pipelines.class_archive import archive_path
from msglake.pipelines.session import LOCAL_DRIVER_GC

from tests.conftest import make_settings

BIN = os.path.dirname(sys.executable)


def test_the_suites_driver_maps_the_archive_make_setup_made(spark):
    archive = archive_path(make_settings("/tmp"))
    assert archive.is_file() and archive.stat().st_size > 0, f"{archive} missing: run make setup"
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in args
    assert LOCAL_DRIVER_GC in args  # the collector `make setup` made the archive under


@pytest.mark.slow
def test_an_archive_that_does_not_fit_is_ignored_silently(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    for jar in archive_path(make_settings("/tmp")).parent.glob("*.jar"):
        os.symlink(jar, jars / jar.name)
    (jars / "msglake-classes.jsa").write_bytes(b"not an archive")  # e.g. left by another JDK or a cut copy
    env = {**os.environ, "MSGLAKE_JARS_DIR": str(jars)}
    r = subprocess.run([os.path.join(BIN, "msglake"), "sql", "SELECT 1 AS a", "--lake", str(tmp_path / "lake"),
                        "--format", "csv"], env=env, capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout, r.stderr) == (0, "a\n1\n", ""), r.stdout + r.stderr
