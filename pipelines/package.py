"""msglake's Python code as one zip for Spark executors (``--py-files`` / ``SparkContext.addPyFile``).

On a cluster the executors run msglake's codecs inside their Python workers, so they must
import ``formats``, ``schemas``, ``pipelines`` and ``transforms``. The zip holds exactly the
packages' ``.py`` files; its name carries a digest of their contents, so a rebuild with the
same code gives the same file and a changed checkout never reuses a stale one. Third-party
libraries (pyarrow, numpy, orjson, cramjam, pandas, pydantic, pyyaml) must be installed on the
executors or shipped as an environment archive (see the README, "Running on a cluster").
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("formats", "schemas", "pipelines", "transforms", "quality")
#: Where the packages live (the repository, or site-packages for an installed msglake).
SOURCE_ROOT = Path(__file__).resolve().parent.parent
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entries carry no build time: same code, same bytes


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (SOURCE_ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def build_pyfiles(out_dir: str | os.PathLike | None = None) -> str:
    """Write (or reuse) ``msglake-<digest>.zip`` in ``out_dir`` and return its absolute path.

    ``out_dir`` defaults to ``$MSGLAKE_DIST_DIR``, else a ``msglake-pyfiles`` folder in the
    system temp directory (never the working directory).
    """
    files = _sources()
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(SOURCE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    folder = Path(out_dir or os.environ.get("MSGLAKE_DIST_DIR") or Path(tempfile.gettempdir(), "msglake-pyfiles"))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder.resolve() / f"msglake-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".zip.tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path in files:
            info = zipfile.ZipInfo(str(path.relative_to(SOURCE_ROOT)), _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, path.read_bytes())
    os.replace(tmp, target)  # atomic: concurrent builds of the same code agree
    return str(target)
