"""The native codec core (the ``msglake_native`` extension, built from ``native/``), when it is there.

The codecs call it for their hot inner steps and keep the Python steps as the reference.
It is used by default; ``MSGLAKE_NATIVE=0`` in the environment, or ``native=False`` given to
a codec, forces the Python path. A missing extension means the Python path, with one
warning that says how to build it.
"""
from __future__ import annotations

import mmap
import os
import warnings
from types import ModuleType
from typing import NamedTuple

import numpy as np
import pyarrow as pa

ENV = "MSGLAKE_NATIVE"
#: The extension's ``API_VERSION`` these codecs call (``native/src/lib.rs``).
API_VERSION = 12
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
    #: Whether the native path reads a file's chunks through a mapping of it instead of copying
    #: them into a buffer (:meth:`_read_chunk`). Only for a format whose broker never cuts a file
    #: in place: a page of a mapping that the file no longer reaches faults (SIGBUS) when read.
    maps_files = False

    def _attach_core(self) -> None:
        self._core = core(self._native)
        self._chunk: bytearray | None = None
        self._window: _Window | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_core", "_chunk", "_window")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._attach_core()

    def _read_chunk(self, fd: int, size: int, pos: int):
        """Up to ``size`` bytes of ``fd`` from ``pos`` (fewer at the end of the file). The native
        path of a format that ``maps_files`` takes them from a mapping (:meth:`_mapped`); otherwise
        it reads every chunk into one reused buffer (the view is valid until the next read): its
        decode copies every value it keeps, and a fresh buffer per chunk cost page faults on every
        read, 15-25 % of an NSQ decode (measured alternating both in one process). The Python path
        gets a new ``bytes``."""
        if self._core is None:
            return os.pread(fd, size, pos)
        if self.maps_files:
            return self._mapped(fd, size, pos)
        if self._chunk is None or len(self._chunk) < size:
            self._chunk = bytearray(size)
        view = memoryview(self._chunk)[:size]
        return view[: os.preadv(fd, [view], pos)]

    def _mapped(self, fd: int, size: int, pos: int):
        """:meth:`_read_chunk` through a mapping of the file, a window of ``MAP_WINDOW`` bytes at a
        time (the pages a worker holds stay bounded). The core reads the page cache in place: the
        copy into a buffer was 19 % of a native RocketMQ decode pass (0.127 of 0.66 s, the 1.19M
        records of the suite's set), and whole passes ran 4-7 % faster mapped (a new mapping per
        decode call, alternated twice). The file's size is checked on every call, so a file that
        shrank reads short, as with ``pread``; the view stays valid while anything holds it (the
        mapping goes when the last view of it does)."""
        st = os.fstat(fd)
        end = min(pos + size, st.st_size)
        if end <= pos:
            return memoryview(b"")
        file = (st.st_dev, st.st_ino)
        w = self._window
        if w is None or w.file != file or pos < w.start or end > w.stop:
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            stop = min(max(start + MAP_WINDOW, end), st.st_size)
            w = self._window = _Window(file, start, stop, memoryview(mmap.mmap(fd, stop - start, offset=start,
                                                                                prot=mmap.PROT_READ)))
        return w.view[pos - w.start:end - w.start]

    def _unmap(self) -> None:
        """Let the mapping of the last file go (at the end of a decode call: the next call maps
        its file again, so no call reads pages another mapped before it)."""
        self._window = None


#: Bytes of a file one mapping of :meth:`NativeCodec._mapped` covers.
MAP_WINDOW = 64 << 20


class _Window(NamedTuple):
    """The mapped bytes ``[start, stop)`` of the file ``(st_dev, st_ino)``."""

    file: tuple[int, int]
    start: int
    stop: int
    view: memoryview


def _warn_once(why: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"{why}, decoding with the slower Python path; build it with `make setup` or "
                      "`pip install ./native` (needs Rust/cargo, https://rustup.rs)", RuntimeWarning, stacklevel=3)


def arrow(batch) -> pa.RecordBatch:
    """What a native step made (a ``msglake_native.Batch``) as a record batch, imported through
    the Arrow C Data Interface: pyarrow's arrays lie over the core's buffers, nothing is copied."""
    return pa.record_batch(batch)


_layouts: dict[tuple[int, int], tuple[pa.Schema, object]] = {}


def layout(core: ModuleType, schema: pa.Schema):
    """The core's ``Layout`` of ``schema`` (made once per schema): a step given it arranges its
    batch in the schema's fields, and :func:`arrow_as` imports that batch as is."""
    key = (id(core), id(schema))
    if key not in _layouts:
        _layouts[key] = (schema, core.Layout(schema))  # the schema is held, so its id stays its own
    return _layouts[key][1]


#: pyarrow's import of an ArrowArray with a schema object it already has (a private method,
#: there since pyarrow 0.17); without it, the PyCapsule protocol, which carries the schema too.
_IMPORT_WITH_SCHEMA = getattr(pa.RecordBatch, "_import_from_c", None)


def arrow_as(batch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch a native step arranged by ``layout(core, schema)`` (or one whose fields are always
    ``schema``'s: ``POSITIONS``, ``OUTER``), imported with ``schema``: only the array crosses the C
    Data Interface (a schema of some forty fields costs more to export and import than the
    array), and no column is reordered, added or cast."""
    if _IMPORT_WITH_SCHEMA is None:
        return pa.record_batch(batch)  # the same fields: the layout's are the schema's
    return _IMPORT_WITH_SCHEMA(batch.array_address(), schema)


#: The small batches of numbers the chunk steps return beside their rows, in the fields the core
#: always gives them (``native/src/lib.rs``: ``positions`` of every walk, and ``outer`` of ``rmq_chunk``;
#: ``tests/formats/test_native.py`` checks them against what the core exports). Imported with
#: these (:func:`arrow_as`), not through the PyCapsule protocol, which exports and imports the
#: schema every time: 15-40 µs per batch, two per RocketMQ chunk of about 1.3 ms (whole native
#: passes 0.700 / 0.702 / 0.695 -> 0.696 / 0.686 / 0.687 s, alternated).
POSITIONS = pa.schema([pa.field("positions", pa.int64())])
POSITIONS_LENGTHS = pa.schema([*POSITIONS, pa.field("lengths", pa.int64())])
OUTER = pa.schema([pa.field("outer", pa.int64())])


def numbers(batch: pa.RecordBatch, column: str | int) -> np.ndarray:
    """A number column of a native batch (no nulls), by name or index (faster in a batch of many
    columns), as NumPy: a read-only view of the core's buffer, or for booleans (bits in Arrow) a
    new array."""
    col = batch.column(column)
    return col.to_numpy(zero_copy_only=col.type != pa.bool_())


def columns(batch: pa.RecordBatch, skip: tuple[str, ...] = ()) -> dict[str, pa.Array]:
    """The columns of a native batch by name, but those in ``skip``."""
    return {name: col for name, col in zip(batch.schema.names, batch.columns) if name not in skip}
