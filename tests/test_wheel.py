"""The wheel: built from the checkout, installed into a fresh virtualenv outside it, and run from an
unrelated folder, as on a cluster node or a notebook host that never saw the repository."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

#: Prints where msglake and its embedded settings were found (a script file: `python -c` is not a
#: reliable check with pyspark installed).
PROBE = """
import msglake
from msglake.conf import DEFAULT_SETTINGS
print(msglake.__file__)
print(DEFAULT_SETTINGS, DEFAULT_SETTINGS.is_file())
print(msglake.load_settings().lake.root)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    src = tmp_path_factory.mktemp("src") / "msglake"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".jars", "lake", "demo-data", "bench-data", "build", "dist", "*.egg-info", "__pycache__",
        ".pytest_cache", "results", "local"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src)],
                   check=True, cwd=dist)
    (built,) = dist.glob("msglake-*.whl")
    return built


def test_the_wheel_holds_one_import_root_and_the_settings(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"msglake"}
    assert "msglake/conf/base/msglake.yaml" in names and "msglake/conf/log4j2.properties" in names
    for package in ("schemas", "formats", "samples", "transforms", "quality", "pipelines/io", "pipelines/jobs",
                    "pipelines/cli"):
        assert f"msglake/{package}/__init__.py" in names
    # The cluster harness and the tests stay out of the shipped package.
    assert not [n for n in names if "/tests/" in n or n.endswith("cluster.py")]


def test_the_installed_wheel_runs_the_demo_from_an_unrelated_folder(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The dependencies come from the test run's own environment (a .pth line adds its site-packages
    # after the new venv's), so nothing is downloaded; msglake itself only from the wheel: the
    # editable install's finder there is a .pth hook, which a path added this way does not run.
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(wheel)], check=True)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MSGLAKE_", "PYSPARK_", "PYTHONPATH"))}
    env["MSGLAKE_JARS_DIR"] = str(REPO / ".jars")
    probe = subprocess.run([str(venv / "bin" / "python"), "probe.py"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    module, settings, root = probe.stdout.splitlines()
    assert module.startswith(str(site)) and settings.startswith(str(site)) and settings.endswith(" True")
    assert root == "lake"

    demo = subprocess.run([str(venv / "bin" / "msglake"), "demo", "--messages", "300"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "[5/5]" in demo.stdout and "Traceback" not in demo.stderr
    assert (elsewhere / "lake" / "messages" / "_delta_log").is_dir()
    assert (elsewhere / "demo-data" / "nsq").is_dir() and (elsewhere / "demo-data" / "rocketmq").is_dir()
