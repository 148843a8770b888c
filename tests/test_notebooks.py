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


def run(name: str, conf: Path, monkeypatch) -> str:
    """Execute the notebook in a fresh kernel (its own Spark session) and return all its text output."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    monkeypatch.setenv("MSGLAKE_CONF", str(conf))  # the kernel inherits the environment
    monkeypatch.delenv("MSGLAKE_LAKE_ROOT", raising=False)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts.extend(str(v) for k, v in out.get("data", {}).items() if k in ("text/plain", "text/html"))
    return "\n".join(texts)


@pytest.fixture
def lake_conf(replayed):
    settings, _, conf = replayed
    return settings, conf


def test_explore_lake_notebook(lake_conf, monkeypatch):
    settings, conf = lake_conf
    text = run("explore_lake.ipynb", conf, monkeypatch)
    assert f"lake: {os.path.abspath(settings.lake.root)}" in text
    assert text.count("<svg") >= 3  # volume, latency, dead-letter reasons
    assert "hops" in text and "orders" in text


def test_replay_at_t_notebook(lake_conf, monkeypatch):
    _, conf = lake_conf
    text = run("replay_at_t.ipynb", conf, monkeypatch)
    assert "the event log gives the same states as an evaluation at that time" in text
    assert "Copies by state over time" in text and "dead_lettered" in text
