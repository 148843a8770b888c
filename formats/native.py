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

import numpy as np
import pyarrow as pa

ENV = "MSGLAKE_NATIVE"
#: The extension's ``API_VERSION`` these codecs call (``native/src/lib.rs``).
API_VERSION = 3
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
        _warn_once("msglake_native is not installed")
        return None
    found = getattr(msglake_native, "API_VERSION", None)
    if found != API_VERSION:
        _warn_once(f"msglake_native is from another msglake version (API {found}, these codecs need {API_VERSION})")
        return None
    return msglake_native


class NativeCodec:
    """What a codec keeps of the native core: the module (``_core``; None on the Python path) and
    the buffer chunks are read into. Both belong to one process: a Spark reader ships its codec
    to the executors, the extension module does not pickle, and each executor finds its own (or
    uses the Python path where it is missing)."""

    _native: bool | None

    def _attach_core(self) -> None:
        self._core = core(self._native)
        self._chunk: bytearray | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_core", "_chunk")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._attach_core()

    def _read_chunk(self, fd: int, size: int, pos: int):
        """Up to ``size`` bytes of ``fd`` from ``pos`` (fewer at the end of the file). The native
        path reads every chunk into one reused buffer (the view is valid until the next read): its
        decode copies every value it keeps, and a fresh buffer per chunk cost page faults on every
        read, 15-25 % of an NSQ decode (measured alternating both in one process). The Python path
        gets a new ``bytes``."""
        if self._core is None:
            return os.pread(fd, size, pos)
        if self._chunk is None or len(self._chunk) < size:
            self._chunk = bytearray(size)
        view = memoryview(self._chunk)[:size]
        return view[: os.preadv(fd, [view], pos)]


def _warn_once(why: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"{why}, decoding with the slower Python path; build it with `make setup` or "
                      "`pip install ./native` (needs Rust/cargo, https://rustup.rs)", RuntimeWarning, stacklevel=3)


def validity(valid: np.ndarray | None) -> pa.Buffer | None:
    """An Arrow validity bitmap of a bool array; None (all valid) when there is no False."""
    return None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def strings(offsets_data: tuple, valid: np.ndarray | None = None, typ: pa.DataType = pa.string()) -> pa.Array:
    """An Arrow string (or binary) array over the core's (int32 offsets, data) buffers, without a copy;
    null where ``valid`` is False."""
    off, data = offsets_data
    return pa.Array.from_buffers(typ, len(off) // 4 - 1, [validity(valid), pa.py_buffer(off), pa.py_buffer(data)])


def optional_strings(column: tuple) -> pa.Array:
    """A string array from the core's (offsets, data, validity bytes)."""
    off, data, valid = column
    return strings((off, data), np.frombuffer(valid, np.bool_))


def optional_ints(column: tuple, typ: pa.DataType = pa.int64()) -> pa.Array:
    """An array of ``typ`` from the core's (int64 values, validity bytes): without a copy for a
    64-bit type (int64, timestamp), cast otherwise."""
    values, valid = column
    mask = validity(np.frombuffer(valid, np.bool_))
    if typ.bit_width == 64:
        return pa.Array.from_buffers(typ, len(values) // 8, [mask, pa.py_buffer(values)])
    return pa.Array.from_buffers(pa.int64(), len(values) // 8, [mask, pa.py_buffer(values)]).cast(typ)


def string_lists(column: tuple) -> pa.Array:
    """A list<string> array from the core's (list offsets, list validity, value offsets, value data)."""
    off, valid, value_off, value_data = column
    n = len(off) // 4 - 1
    return pa.Array.from_buffers(pa.list_(pa.string()), n, [validity(np.frombuffer(valid, np.bool_)), pa.py_buffer(off)],
                                 children=[strings((value_off, value_data))])


def string_maps(offsets: bytes, keys: pa.Array, values: pa.Array) -> pa.Array:
    """A map<string, string> array of ``keys``/``values`` split at the core's int32 ``offsets``."""
    return pa.MapArray.from_arrays(pa.array(np.frombuffer(offsets, np.int32)), keys, values)
