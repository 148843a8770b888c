"""Quarantine rows do not depend on the chunk size a codec reads with (issue 18).

A broken region of a segment must come out as the same rows (positions, lengths, reasons,
raw bytes) whatever ``chunk_bytes`` is, on both the native and the Python path.
"""
from __future__ import annotations

import os
import struct
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from msglake.formats.base import decode_root
from msglake.formats.nsq_ext import NsqExtCodec
from msglake.formats.rocketmq_commitlog import RocketMqCommitLogCodec
from msglake.samples.nsq_writer import NsqQueueWriter
from msglake.samples.rocketmq_writer import CommitLogWriter, Message

TS = 1_793_500_000_123_456_789
QUARANTINE = ["segment", "segmentPosition", "recordLength", "reason", "rawBytes"]
PATHS = [pytest.param(True, id="native"), pytest.param(False, id="python")]


def _quarantine(codec, root: str) -> pa.Table:
    q = decode_root(codec, root).quarantined.select(QUARANTINE)
    return q.sort_by([("segment", "ascending"), ("segmentPosition", "ascending")])


def _rocketmq_store(root: str, junk: bytes, at: int, n: int = 30) -> None:
    """``n`` records in one file, record ``at`` followed by ``junk`` (a broken region)."""
    with CommitLogWriter(root, 1 << 20) as w:
        for i in range(n):
            w.put(Message("t", b"body-%d" % i + bytes(i * 37 % 500), {"UNIQ_KEY": f"U{i}"}))
            if i == at:
                w.put_raw(junk)


def _nsq_store(root: str, junk: bytes, at: int, n: int = 30) -> None:
    with NsqQueueWriter(root, "t", 0) as w:
        for i in range(n):
            w.put(b"body-%d" % i + bytes(i * 37 % 500), timestamp_ns=TS)
            if i == at:
                w.put_raw(junk)


@pytest.mark.parametrize("native", PATHS)
def test_a_long_broken_rocketmq_region_is_one_row_whatever_the_chunk(tmp_path, native):
    _rocketmq_store(str(tmp_path), b"\x5a" * 50_000, at=4)
    whole = _quarantine(RocketMqCommitLogCodec(native=native), str(tmp_path))
    assert whole.num_rows == 1 and whole["recordLength"][0].as_py() == 50_000
    for chunk in (4096, 20_000, 65_536):
        assert _quarantine(RocketMqCommitLogCodec(chunk_bytes=chunk, native=native), str(tmp_path)).equals(whole)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(["nsq", "rocketmq"]), junk=st.binary(min_size=1, max_size=3000),
       size=st.integers(1, 40_000), at=st.integers(0, 28), chunk=st.integers(600, 30_000), native=st.booleans())
def test_quarantine_rows_are_the_same_for_any_chunk_size(fmt, junk, size, at, chunk, native):
    region = (junk * (size // len(junk) + 1))[:size]
    if fmt == "nsq":
        region = struct.pack(">i", -1) + region  # a length prefix no writer produces
    with tempfile.TemporaryDirectory() as root:
        (_nsq_store if fmt == "nsq" else _rocketmq_store)(root, region, at)
        codec = NsqExtCodec if fmt == "nsq" else RocketMqCommitLogCodec
        whole = _quarantine(codec(native=native), root)
        assert whole.num_rows >= 1
        assert _quarantine(codec(chunk_bytes=chunk, native=native), root).equals(whole)
