"""JSON ext headers of NSQ records -> unified-schema columns, column by column.

Headers are parsed per record (orjson), then every column is built for all headers of a
chunk at once: one list comprehension per key and Arrow kernels, with a slower exact path
only for a column whose values are not already of the expected JSON type.
"""
from __future__ import annotations

import json

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from schemas.messages import TS

TRACE_KEY = "##trace_id"
TAG_KEY = "##client_dispatch_tag"
COMPRESS_KEY = "nsq.client.compress"
COMPRESSION_CODECS = {"1": "gzip", "2": "snappy", "3": "lz4"}  # go-nsq compress.go

_TS_HEADERS = ("bornTimestamp", "startDeliverTime", "expireTime")
_STR_HEADERS = ("bornHost", "searchKey", "transactionId", "correlationId")
#: OpenMessaging header names that become columns (so they stay out of ``properties``).
COLUMN_HEADERS = frozenset(
    _TS_HEADERS + _STR_HEADERS + ("priority", "durability", "delayTime", "traceId", "messageKey", "shardingKey", "keys")
)
#: Client/broker keys that are not user properties (they still appear in ``headers``).
RESERVED_PREFIXES = ("##", "nsq.")

_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the largest Spark timestamp
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class HeaderError(ValueError):
    """The ext header of a record cannot be accepted; the record is quarantined."""


def load_header(raw: bytes) -> dict:
    """Parse one header; the broker would have refused what this refuses.

    Raises
    ------
    HeaderError
        When the bytes are not a JSON object, or ``##trace_id`` is not a decimal uint64
        string (nsqd answers ``INVALID_TRACE_ID``).

    Examples
    --------
    >>> load_header(b'{"##trace_id":"7"}')
    {'##trace_id': '7'}
    """
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise HeaderError(f"ext header is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise HeaderError(f"ext header is JSON but not an object ({type(doc).__name__})")
    trace = doc.get(TRACE_KEY)
    if trace is not None and (
        not isinstance(trace, str) or not (trace.isascii() and trace.isdigit()) or int(trace) > _INT64[1] * 2 + 1
    ):
        raise HeaderError(f"{TRACE_KEY} must be a decimal uint64 string, got {trace!r}")
    return doc


def as_text(v) -> str:
    """A header value as text: strings as they are, anything else as compact JSON."""
    if isinstance(v, str):
        return v
    try:
        return orjson.dumps(v).decode()
    except TypeError:  # integers past 64 bits: orjson reads them, but will not write them
        return json.dumps(v, separators=(",", ":"))


def _as_int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _as_keys(v) -> list[str] | None:
    if isinstance(v, str):
        return [k for k in v.split(" ") if k]
    if isinstance(v, list):
        return [as_text(k) for k in v]
    return None


def _text_column(values: list) -> pa.Array:
    try:
        arr = pa.array(values)
        if arr.type in (pa.string(), pa.null()):
            return arr.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # e.g. an integer past int64
        pass
    return pa.array([None if v is None else as_text(v) for v in values], pa.string())


def _int_column(values: list, lo: int, hi: int) -> pa.Array:
    """int64 column; values that are not integers (or integral strings) or out of range become null."""
    try:
        arr = pa.array(values)
        fast = arr.type in (pa.int64(), pa.null())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        fast = False
    if not fast:
        exact = [_as_int(v) for v in values]
        arr = pa.array([i if i is not None and lo <= i <= hi else None for i in exact], pa.int64())
    arr = arr.cast(pa.int64())
    out_of_range = pc.or_(pc.less(arr, lo), pc.greater(arr, hi))
    return pc.if_else(out_of_range, pa.scalar(None, pa.int64()), arr)


def header_columns(docs: list[dict]) -> dict[str, pa.Array]:
    """Columns of the unified schema from parsed headers, one row per header.

    ``traceId`` is the header ``traceId``, else ``##trace_id``; ``messageKey`` is
    ``messageKey``, else ``shardingKey``; ``tags`` is ``##client_dispatch_tag``. Values of the
    wrong type leave the column null; the value itself is still in ``headers``.

    Examples
    --------
    >>> cols = header_columns([{"##trace_id": "7", "priority": 9, "app": "x"}, {}])
    >>> cols["traceId"].to_pylist(), cols["priority"].to_pylist(), cols["properties"].to_pylist()
    (['7', None], [9, None], [[('app', 'x')], []])
    """
    col = {}

    def get(key: str) -> list:
        return [d.get(key) for d in docs]

    for key in _TS_HEADERS:
        col[key] = pc.multiply(_int_column(get(key), 0, _MAX_MS), 1000).cast(TS)
    for key in _STR_HEADERS:
        col[key] = _text_column(get(key))
    col["priority"] = _int_column(get("priority"), *_INT32).cast(pa.int32())
    col["durability"] = _int_column(get("durability"), *_INT32).cast(pa.int32())
    col["delayTime"] = _int_column(get("delayTime"), *_INT64)
    col["traceId"] = pc.coalesce(_text_column(get("traceId")), _text_column(get(TRACE_KEY)))
    col["messageKey"] = pc.coalesce(_text_column(get("messageKey")), _text_column(get("shardingKey")))
    col["tags"] = _text_column(get(TAG_KEY))
    col["keys"] = pa.array([None if v is None else _as_keys(v) for v in get("keys")], pa.list_(pa.string()))
    codes = get(COMPRESS_KEY)
    col["compression"] = pa.array(
        [None if c is None else COMPRESSION_CODECS.get(as_text(c), f"unknown:{as_text(c)}") for c in codes], pa.string()
    )

    counts = np.fromiter((len(d) for d in docs), np.int64, len(docs))
    keys = pa.array([k for d in docs for k in d], pa.string())
    values = pa.array([v if type(v) is str else as_text(v) for d in docs for v in d.values()], pa.string())
    col["headers"] = _maps(counts, keys, values)
    reserved = pc.or_(
        pc.is_in(keys, value_set=pa.array(sorted(COLUMN_HEADERS), pa.string())),
        pc.or_(*(pc.starts_with(keys, p) for p in RESERVED_PREFIXES)),
    )
    is_property = pc.invert(reserved).to_numpy(zero_copy_only=False)
    row_of_key = np.repeat(np.arange(len(docs)), counts)
    prop_counts = np.bincount(row_of_key[is_property], minlength=len(docs))
    col["properties"] = _maps(prop_counts, keys.filter(pa.array(is_property)), values.filter(pa.array(is_property)))
    return col


def _maps(counts: np.ndarray, keys: pa.Array, values: pa.Array) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


def empty_maps(n: int) -> pa.Array:
    """``n`` empty string maps (rows without a header)."""
    return _maps(np.zeros(n, np.int64), pa.array([], pa.string()), pa.array([], pa.string()))
