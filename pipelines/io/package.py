"""msglake's Python code as one zip for Spark executors (``--py-files`` / ``SparkContext.addPyFile``).

On a cluster the executors run msglake's codecs inside their Python workers, so they must
import ``msglake.formats``, ``msglake.schemas``, ``msglake.pipelines`` and the rest. The zip
holds the ``msglake`` package as it is installed (``.py`` files and the embedded settings); its name carries a digest of their contents, so a rebuild with the
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

#: The subpackages of ``msglake`` (each a folder of the checkout, mapped by pyproject.toml).
PACKAGES = ("conf", "schemas", "formats", "samples", "transforms", "quality", "pipelines")
_DATA = (".py", ".yaml", ".properties")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip entries carry no build time: same code, same bytes


def _sources() -> list[tuple[str, Path]]:
    """(name in the zip, file) of every module and data file of the ``msglake`` package."""
    import importlib

    import msglake

    roots = {"msglake": Path(msglake.__file__).parent}
    roots.update({f"msglake/{p}": Path(importlib.import_module(f"msglake.{p}").__file__).parent for p in PACKAGES})
    files = []
    for prefix, root in roots.items():
        walk = root.glob("*") if prefix == "msglake" else root.rglob("*")
        for path in walk:
            rel = path.relative_to(root)
            if prefix == "msglake/conf" and rel.parts[0] == "local":
                continue  # a user's local overlay (it may hold secrets) stays on this machine
            if path.is_file() and path.suffix in _DATA and "__pycache__" not in path.parts:
                files.append((f"{prefix}/{rel.as_posix()}", path))
    return sorted(files)


def build_pyfiles(out_dir: str | os.PathLike | None = None) -> str:
    """Write (or reuse) ``msglake-<digest>.zip`` in ``out_dir`` and return its absolute path.

    ``out_dir`` defaults to ``$MSGLAKE_DIST_DIR``, else a ``msglake-pyfiles`` folder in the
    system temp directory (never the working directory).
    """
    files = _sources()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    folder = Path(out_dir or os.environ.get("MSGLAKE_DIST_DIR") or Path(tempfile.gettempdir(), "msglake-pyfiles"))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder.resolve() / f"msglake-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return str(target)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".zip.tmp")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path in files:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, path.read_bytes())
    os.replace(tmp, target)  # atomic: concurrent builds of the same code agree
    return str(target)
