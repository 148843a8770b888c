"""The native codec core (the ``msglake_native`` extension, built from ``native/``), when it is there.

The codecs call it for their hot inner steps and keep the Python steps as the reference.
It is used by default; ``MSGLAKE_NATIVE=0`` in the environment, or ``native=False`` given to
a codec, forces the Python path. A missing extension means the Python path, with one
warning that says how to build it.
"""
from __future__ import annotations

import os
import warnings
from types import ModuleType

ENV = "MSGLAKE_NATIVE"
_warned = False


def core(wanted: bool | None = None) -> ModuleType | None:
    """The extension module, or None when the Python path is asked for or it is not installed.

    ``wanted``: True/False from a codec's ``native=`` argument; None follows ``MSGLAKE_NATIVE``
    (default on).

    >>> core(False) is None
    True
    """
    if wanted is None:
        wanted = os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    if not wanted:
        return None
    try:
        import msglake_native
    except ImportError:
        _warn_once()
        return None
    return msglake_native


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("msglake_native is not installed, decoding with the slower Python path; build it with "
                      "`make setup` or `pip install ./native` (needs Rust/cargo, https://rustup.rs)",
                      RuntimeWarning, stacklevel=3)
