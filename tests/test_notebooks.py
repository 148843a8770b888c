"""The notebooks run headless, top to bottom, against a demo-shaped lake, and are committed without outputs."""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_notebooks_are_committed_without_outputs():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["explore_lake.ipynb", "replay_at_t.ipynb"]
    for name in names:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{name}: a cell has outputs"


def run(name: str, kernel) -> str:
    """Execute the notebook in the shared kernel, its namespace reset first, and return all its text output."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # A fresh namespace: a name the notebook uses but does not define fails here as it would for a
    # user opening it alone. The Spark session outlives the reset, so the second notebook's
    # build_session finds the first one's JVM instead of starting its own (~25 s here).
    nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    NotebookClient(nb, km=kernel, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts.extend(str(v) for k, v in out.get("data", {}).items() if k in ("text/plain", "text/html"))
    return "\n".join(texts)


@pytest.fixture(scope="module")
def lake_conf(replayed):
    settings, _, conf = replayed
    return settings, conf


@pytest.fixture(scope="module")
def kernel(lake_conf):
    """One kernel for the notebooks, started in the notebooks' folder with the test lake's settings."""
    from jupyter_client.manager import KernelManager

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MSGLAKE_CONF", str(lake_conf[1]))  # the kernel inherits the environment
        mp.delenv("MSGLAKE_LAKE_ROOT", raising=False)
        km = KernelManager(kernel_name="python3")
        km.start_kernel(cwd=str(NOTEBOOKS))
    try:
        yield km
    finally:
        km.shutdown_kernel(now=True)


def test_explore_lake_notebook(lake_conf, kernel):
    settings, _ = lake_conf
    text = run("explore_lake.ipynb", kernel)
    assert f"lake: {os.path.abspath(settings.lake.root)}" in text
    assert text.count("<svg") >= 3  # volume, latency, dead-letter reasons
    assert "hops" in text and "orders" in text


def test_replay_at_t_notebook(kernel):
    text = run("replay_at_t.ipynb", kernel)
    assert "the event log gives the same states as an evaluation at that time" in text
    assert "Copies by state over time" in text and "dead_lettered" in text
