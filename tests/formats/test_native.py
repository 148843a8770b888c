"""The native codec core against the Python reference: identical Arrow output, quarantine rows and plans.

Every case decodes the same files twice, ``native=True`` and ``native=False``, and requires
the same table (messages and quarantine rows with their reasons, positions and raw bytes),
the same byte accounting, the same scan, split points and advance steps.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import random
import shutil
import struct
import sys
import tempfile
import warnings
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from msglake.formats import native as N
from msglake.formats.base import decode_root
from msglake.errors import ConfigError
from msglake.formats.nsq_ext import NsqExtCodec
from msglake.formats.registry import codec_class, get_codec
from msglake.formats.rocketmq_commitlog import RocketMqCommitLogCodec
from msglake.samples import nsq as nsq_samples, rocketmq as rocketmq_samples
from msglake.samples.nsq_writer import NsqQueueWriter
from msglake.samples.rocketmq_writer import CommitLogWriter, Inner, Message

#: `make test` sets MSGLAKE_REQUIRE_NATIVE=1 where cargo is installed: then a missing core fails
#: these tests instead of skipping them (a build that broke must not pass as "skipped").
if importlib.util.find_spec("msglake_native") is None and os.environ.get("MSGLAKE_REQUIRE_NATIVE") == "1":
    raise RuntimeError("cargo is installed but the native core is not built: see .venv/native-build.log")
needs_native = pytest.mark.skipif(importlib.util.find_spec("msglake_native") is None,
                                  reason="the native core is not built (make setup, or pip install ./native)")

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
TS = 1_793_500_000_123_456_789
#: Examples per hypothesis test; raise MSGLAKE_FUZZ_EXAMPLES for a longer differential fuzz run.
FAST = settings(max_examples=int(os.environ.get("MSGLAKE_FUZZ_EXAMPLES", "30")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def assert_same(codec_cls, root: str, **kw) -> pa.Table:
    """Decode ``root`` on both paths; everything must agree. Returns the table."""
    native, python = codec_cls(native=True, **kw), codec_cls(native=False, **kw)
    a, b = decode_root(native, root), decode_root(python, root)
    # Valid Arrow in full (offsets monotonic and within their data), whatever the corruption.
    a.table.validate(full=True)
    b.table.validate(full=True)
    assert a.scan.segments == b.scan.segments and a.scan.notes == b.scan.notes
    assert (a.decoded_bytes, a.quarantined_bytes, a.padding_bytes) == (b.decoded_bytes, b.quarantined_bytes,
                                                                       b.padding_bytes)
    if not a.table.equals(b.table):
        for name in a.table.column_names:  # name the first column that differs
            assert a.table[name].to_pylist() == b.table[name].to_pylist(), name
    for seg in (s for s in a.scan.segments if s.committed_end > 0):  # the source plans no empty range
        end = seg.committed_end
        for target in (1, 700, 1 << 16):
            assert native.split_points(root, seg, 0, end, target) == python.split_points(root, seg, 0, end, target)
        for budget in ((1, None), (None, 3), (5000, 50), (None, None)):
            assert native.advance(root, seg, 0, end, *budget) == python.advance(root, seg, 0, end, *budget)
    return a.table


def test_without_the_extension_the_python_path_is_used_with_one_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "msglake_native", None)  # import fails as if not installed
    monkeypatch.setattr(N, "_warned", False)
    monkeypatch.delenv(N.ENV, raising=False)
    with pytest.warns(RuntimeWarning, match="pip install ./native"):
        assert NsqExtCodec()._core is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RocketMqCommitLogCodec()._core is None  # warned once only


@needs_native
def test_a_build_of_another_version_is_not_used(monkeypatch):
    import msglake_native

    monkeypatch.setattr(msglake_native, "API_VERSION", N.API_VERSION + 1)
    monkeypatch.setattr(N, "_warned", False)
    with pytest.warns(RuntimeWarning, match="another msglake version"):
        assert N.core(True) is None


@needs_native
def test_the_switch_forces_the_python_path(monkeypatch):
    monkeypatch.setenv(N.ENV, "0")
    assert N.core() is None and NsqExtCodec()._core is None and RocketMqCommitLogCodec()._core is None
    monkeypatch.setenv(N.ENV, "1")
    assert N.core() is not None and N.core(False) is None
    assert RocketMqCommitLogCodec()._core is not None and RocketMqCommitLogCodec(native=False)._core is None


@needs_native
@pytest.mark.parametrize("fmt", ["nsq-ext", "rocketmq-commitlog"])
def test_the_native_option_is_one_of_each_codecs_options(fmt, monkeypatch):
    monkeypatch.delenv(N.ENV, raising=False)
    options = codec_class(fmt).Options
    assert get_codec(fmt, options.from_strings({"native": "false"}, "source"))._core is None
    assert get_codec(fmt, options.from_strings({"Native": ""}, "source"))._core is not None  # unset: the default
    assert get_codec(fmt, {"native": True})._core is not None
    with pytest.raises(ConfigError, match="native"):
        options.from_strings({"native": "maybe"}, "source")


@needs_native
@pytest.mark.parametrize("native", [True, False, None])
def test_a_codec_pickles_for_the_executors_and_keeps_its_path(native, monkeypatch):
    monkeypatch.delenv(N.ENV, raising=False)  # None: the default, the native core
    for cls in (NsqExtCodec, RocketMqCommitLogCodec):
        copy = pickle.loads(pickle.dumps(cls(native=native, chunk_bytes=4096)))
        assert copy.chunk_bytes == 4096 and (copy._core is None) == (native is False)


# --------------------------------------------------------------------------- NSQ


@needs_native
@pytest.mark.parametrize("seed", [7, 8])
def test_nsq_sample_data_path_with_every_corruption_kind(tmp_path, seed):
    nsq_samples.generate(str(tmp_path), 1500, seed=seed, max_bytes_per_file=64 << 10)
    table = assert_same(NsqExtCodec, str(tmp_path), storeHost="10.0.0.5:4150")
    assert table.filter(pa.compute.is_valid(table["reason"])).num_rows > 5  # the corruptions are there
    assert_same(NsqExtCodec, str(tmp_path), chunk_bytes=3000)


@needs_native
def test_clean_nsq_chunks_are_decoded_in_one_native_pass(tmp_path, monkeypatch):
    """The one-pass path (``nsq::chunk``) takes every chunk of a data path without bad records, and
    gives what the steps give; a chunk with a corrupt record goes step by step."""
    from msglake.formats import nsq_ext

    plain = []
    frame_chunk = nsq_ext.frame_chunk
    def spy(buf, core=None, *where):
        fr, rows = frame_chunk(buf, core, *where)
        if core is not None and len(fr.positions):  # (a chunk smaller than its first record is read again)
            plain.append(rows is not None)
        return fr, rows

    monkeypatch.setattr(nsq_ext, "frame_chunk", spy)
    truth = nsq_samples.generate(str(tmp_path / "clean"), 1500, seed=3, max_bytes_per_file=64 << 10, bad_inputs=False)
    table = assert_same(NsqExtCodec, str(tmp_path / "clean"), chunk_bytes=16 << 10)
    assert table.num_rows == len(truth.messages) and pa.compute.sum(pa.compute.is_valid(table["tags"])).as_py() > 100
    assert len(plain) > 20 and all(plain)
    plain.clear()
    nsq_samples.generate(str(tmp_path / "noisy"), 1500, seed=3, max_bytes_per_file=64 << 10)
    assert_same(NsqExtCodec, str(tmp_path / "noisy"), chunk_bytes=16 << 10)
    assert any(plain) and not all(plain)


@needs_native
def test_nsq_live_data_path(tmp_path):
    nsq_samples.write_live(str(tmp_path), 400, pause=0)
    assert_same(NsqExtCodec, str(tmp_path))



@needs_native
def test_many_header_names_in_one_pass(tmp_path, monkeypatch):
    """More header names in a chunk than the core's name table holds (the rest go to its map),
    of every length: the one-pass path takes them and gives what the steps give."""
    from msglake.formats import nsq_ext

    plain = []
    frame_chunk = nsq_ext.frame_chunk
    def spy(buf, core=None, *where):
        fr, rows = frame_chunk(buf, core, *where)
        if core is not None and len(fr.positions):
            plain.append(rows is not None)
        return fr, rows

    monkeypatch.setattr(nsq_ext, "frame_chunk", spy)
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        for i in range(300):
            # User properties first, then the names of columns, coded once the table is full.
            header = ({f"h{i:02d}": "v", "k" * (1 + i % 30): i} if i < 80 else
                      {"priority": i % 10, "keys": f"a{i} b", "##trace_id": str(i), "h05": "w", "k" * (1 + i % 30): i})
            w.put(b"x%d" % i, header=dict(sorted(header.items())), timestamp_ns=TS + i)
    table = assert_same(NsqExtCodec, str(tmp_path))
    assert table.num_rows == 300 and plain and all(plain)
    assert {k for m in table["properties"].to_pylist() for k, _ in m} >= {"h00", "h79", "k", "k" * 30}
    assert table["keys"][299].as_py() == ["a299", "b"] and table["traceId"][299].as_py() == "299"


_values = st.one_of(st.text(max_size=8), st.integers(-(1 << 62), 1 << 62), st.booleans(), st.none(),
                    st.floats(allow_nan=False), st.lists(st.integers(-(1 << 63), (1 << 64) - 1), max_size=2))
_headers = st.one_of(
    st.dictionaries(st.sampled_from(["##trace_id", "##client_dispatch_tag", "priority", "keys", "app",
                                     "nsq.client.compress", "bornTimestamp", "messageKey", "x-y"]), _values, max_size=5),
    st.dictionaries(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=6),
                    st.one_of(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=6),
                              st.integers(-(10**18) + 1, 10**18 - 1)), max_size=4),
    st.sampled_from([b"{}", b"not json", b"[1]", b'{"a":1,"a":2}', b'{"##trace_id":"12x"}', b'{"a" : "b"}',
                     b'{"priority":123456789012345678901234}', b'{"a":"\\u00e9","b":-0}']),
)
# Values the integer, keys and compression rules read from strings (Python's int(s.strip()) rules).
_numberish = st.one_of(st.text(alphabet="0123456789_+- ", max_size=24), st.integers(-(10**18) + 1, 10**18 - 1),
                       st.sampled_from([" 42 ", "1_000", "+7", "007", "1__0", "9" * 25, "3000000000",
                                        "253402300799999"]))
_column_headers = st.dictionaries(
    st.sampled_from(["priority", "durability", "delayTime", "bornTimestamp", "expireTime", "startDeliverTime", "keys",
                     "nsq.client.compress", "traceId", "##trace_id", "messageKey", "shardingKey", "bornHost", "app"]),
    _numberish, max_size=6)
_headers = st.one_of(_headers, _column_headers)
_nsq_records = st.lists(st.tuples(st.binary(max_size=60), st.one_of(st.none(), _headers, st.sampled_from(["tag", ""]))),
                        min_size=1, max_size=25)


def _nsq_segment(root: str, records, flips: list[tuple[int, int]], cut: int) -> None:
    with NsqQueueWriter(root, "t", 0) as w:
        for i, (body, header) in enumerate(records):
            if isinstance(header, str):
                w.put(body, tag=header, timestamp_ns=TS + i)
            else:
                w.put(body, header=header, timestamp_ns=TS + i)
        seg = os.path.join(root, "t", w.segment)
    data = bytearray(open(seg, "rb").read())
    for at, value in flips:
        if data:
            data[at % len(data)] = value
    with open(seg, "wb") as f:
        f.write(data[: len(data) - cut % 7])


@needs_native
@FAST
@given(records=_nsq_records, flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3),
       cut=st.integers(0, 100), chunk=st.sampled_from([64, 257, 4096, 8 << 20]))
def test_nsq_generated_segments_with_corruption(records, flips, cut, chunk):
    with tempfile.TemporaryDirectory() as root:
        _nsq_segment(root, records, flips, cut)
        assert_same(NsqExtCodec, root, chunk_bytes=chunk)


# --------------------------------------------------------------------------- RocketMQ


@needs_native
@pytest.mark.parametrize("folder", ["rocketmq", "rocketmq-batch"])
def test_real_broker_files(tmp_path, folder):
    os.makedirs(tmp_path / "commitlog")
    for name in os.listdir(os.path.join(DATA, folder)):
        if name.isdigit():
            shutil.copy(os.path.join(DATA, folder, name), tmp_path / "commitlog")
    table = assert_same(RocketMqCommitLogCodec, str(tmp_path))
    assert table.num_rows >= 2


@needs_native
@pytest.mark.parametrize("seed", [7, 9])
def test_rocketmq_sample_store_with_every_corruption_kind(tmp_path, seed):
    rocketmq_samples.generate(str(tmp_path), 1200, seed=seed, file_size=96 << 10)
    table = assert_same(RocketMqCommitLogCodec, str(tmp_path))
    assert table.filter(pa.compute.is_valid(table["reason"])).num_rows > 5
    assert_same(RocketMqCommitLogCodec, str(tmp_path), chunk_bytes=5000, verifyCrc=False, decompress=True)


@needs_native
def test_compressed_bodies_inflate_in_the_core_and_the_rest_as_in_python(tmp_path, monkeypatch):
    """With ``decompress``, the core inflates each whole, checked stream itself: a chunk of such
    bodies needs no Python step. A body it leaves as stored (bytes after a zlib stream, which
    Python's zlib ignores; a stream that does not decompress) is decided by the Python step, with
    the same rows and quarantine reasons on both paths."""
    from msglake.formats import rocketmq_commitlog as R

    plain = b'{"report":"' + b"ab" * 3000 + b'"}'
    calls = []
    real = R._decompress
    monkeypatch.setattr(R, "_decompress", lambda body, codec: calls.append(codec) or real(body, codec))
    whole = str(tmp_path / "whole")
    with CommitLogWriter(whole, 1 << 20) as w:
        for codec in ("zlib", "lz4", "zstd", "zlib"):
            w.put(Message("t", plain, compression=codec))
        w.put(Message("t", plain, compression="zlib", compression_type_bits=False))
    table = assert_same(RocketMqCommitLogCodec, whole, decompress=True)
    assert table["body"].to_pylist() == [plain] * 5 and table["compression"].null_count == 5
    assert calls == ["zlib", "lz4", "zstd", "zlib", "zlib"]  # the Python path's; the core inflated its own

    left = str(tmp_path / "left")
    with CommitLogWriter(left, 1 << 20) as w:
        w.put(Message("t", plain, compression="zstd"))
        for body in (zlib.compress(plain, 5) + b"xx", b"not zlib at all"):
            rec = bytearray(w.record_bytes(Message("t", body)))
            rec[36:40] = struct.pack(">i", 0x301)  # says zlib-compressed
            w.put_raw(bytes(rec))
    calls.clear()
    table = assert_same(RocketMqCommitLogCodec, left, decompress=True)
    assert calls == ["zlib", "zlib"] + ["zstd", "zlib", "zlib"]  # native: the two it left; then Python's three
    rows = table.filter(pa.compute.is_null(table["reason"]))
    assert rows["body"].to_pylist() == [plain, plain] and rows["compression"].null_count == 2
    [why] = table.filter(pa.compute.is_valid(table["reason"]))["reason"].to_pylist()
    assert why.startswith("body does not decompress as zlib: ")


@needs_native
@pytest.mark.parametrize("body, sysflag", [
    ("789c03020000030001", 0x001),  # zlib: its first match reaches before the start ("distance too far back")
    ("04224d1860408205000000106101000000000000", 0x101),  # LZ4: a block ending in a match
    ("04224d186440a7050000001061010000000000004f98e8bb", 0x101),  # the same with a content checksum
    # zstd: a window of 2^28 and 1 MiB of content; libzstd takes it in one pass, refuses it streaming
    ("28b52ffd8090000010000200107a0200107a0200107a0200107a0200107a0200107a0200107a0300107a", 0x201),
])
def test_streams_pythons_libraries_refuse_are_quarantined_on_both_paths(tmp_path, body, sysflag):
    """Bodies a lenient decoder would inflate (and the core once did) but Python's libraries
    refuse: both paths quarantine them with the library's reason."""
    with CommitLogWriter(str(tmp_path), 1 << 20) as w:
        rec = bytearray(w.record_bytes(Message("t", bytes.fromhex(body))))
        rec[36:40] = struct.pack(">i", sysflag)
        w.put_raw(bytes(rec))
    table = assert_same(RocketMqCommitLogCodec, str(tmp_path), decompress=True)
    [why] = table["reason"].to_pylist()
    assert why.startswith("body does not decompress as ")


@needs_native
@FAST
@given(codec=st.sampled_from(["zlib", "lz4", "lz4 unchecked", "zstd"]), plain=st.binary(max_size=400).map(lambda b: b * 4),
       flips=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=2),
       end=st.sampled_from(["whole", "cut", "extra"]))
def test_broken_compressed_bodies_are_decided_alike(codec, plain, flips, end):
    """Bodies that say they are compressed, with bytes flipped, cut short or followed by more: the
    core inflates only what the Python step would inflate to the same bytes."""
    import cramjam

    from msglake.formats import rocketmq_layout as L
    from msglake.samples.rocketmq_writer import compress

    if codec == "lz4 unchecked":  # no content checksum: a flipped byte can still decode, to other bytes
        codec, c = "lz4", cramjam.lz4.Compressor(content_checksum=False)
        c.compress(plain)
        body = bytearray(bytes(c.finish()))
    else:
        body = bytearray(compress(plain, codec))
    for at, value in flips:
        body[at % len(body)] = value
    body = body[:-3] if end == "cut" else body + b"\x00\x01" if end == "extra" else body
    with tempfile.TemporaryDirectory() as root:
        with CommitLogWriter(root, 1 << 20) as w:
            rec = bytearray(w.record_bytes(Message("t", bytes(body))))
            rec[36:40] = struct.pack(">i", L.COMPRESSED_FLAG | L.COMPRESSION_BITS[codec] << 8)
            w.put_raw(bytes(rec))
        assert_same(RocketMqCommitLogCodec, root, decompress=True)


#: (literals, offset, match length nibble): offsets mostly within the literals so far, some not.
_lz4_sequence = st.tuples(st.binary(min_size=1, max_size=14), st.integers(1, 4) | st.integers(0, 40), st.integers(0, 14))


@needs_native
@FAST
@given(sequences=st.lists(_lz4_sequence, min_size=1, max_size=6), last=st.none() | st.binary(max_size=14),
       junk=st.binary(max_size=3))
def test_any_lz4_block_is_decided_alike(sequences, last, junk):
    """A frame without checksums around a block of LZ4 sequences (literals, an offset, a match
    length; some reaching before the start, some ending the block in a match, some followed by
    junk): the core and the Python step (the LZ4 C library's end-of-block rules) must agree."""
    from msglake.formats import rocketmq_layout as L

    block = b"".join(bytes([len(lit) << 4 | ml]) + lit + struct.pack("<H", off) for lit, off, ml in sequences)
    block += (bytes([len(last) << 4]) + last if last is not None else b"") + junk
    # FLG 0x60: independent blocks, no checksums; BD 0x40: blocks of up to 64 KiB; 0x82 its header checksum.
    frame = bytes.fromhex("04224d18604082") + struct.pack("<I", len(block)) + block + bytes(4)
    with tempfile.TemporaryDirectory() as root:
        with CommitLogWriter(root, 1 << 20) as w:
            rec = bytearray(w.record_bytes(Message("t", frame)))
            rec[36:40] = struct.pack(">i", L.COMPRESSED_FLAG | L.COMPRESSION_BITS["lz4"] << 8)
            w.put_raw(bytes(rec))
        assert_same(RocketMqCommitLogCodec, root, decompress=True)


@needs_native
def test_rocketmq_sparse_live_file(tmp_path):
    src = str(tmp_path / "src")
    with CommitLogWriter(src, 1 << 20) as w:
        placed = [w.put(Message("orders", b"%05d" % i * 300, {"KEYS": f"k{i} x"})) for i in range(60)]
    name = "00000000000000000000"
    data = open(os.path.join(src, "commitlog", name), "rb").read()
    os.makedirs(tmp_path / "live" / "commitlog")
    with open(tmp_path / "live" / "commitlog" / name, "wb") as f:
        f.truncate(1 << 20)  # a hole where records 20..40 were never written, and a hole after
        f.write(data[: placed[20].position])
        f.seek(placed[40].position)
        f.write(data[placed[40].position : placed[-1].position + placed[-1].length])
    assert_same(RocketMqCommitLogCodec, str(tmp_path / "live"))


@needs_native
def test_the_number_batches_of_the_chunk_steps_are_what_their_declared_schemas_say(tmp_path):
    """``native.POSITIONS``, ``POSITIONS_LENGTHS`` and ``OUTER``, with which the codecs import the
    chunk steps' small batches, are the fields the core exports for them (checked on every call of
    a decode of each format, through the PyCapsule protocol, which carries the core's own schema)."""
    seen = []

    class Checked:
        def __init__(self, core):
            self._core = core

        def __getattr__(self, name):
            step = getattr(self._core, name)
            expected = {"rmq_chunk": {0: N.POSITIONS_LENGTHS, 7: N.OUTER}, "rmq_walk": {0: N.POSITIONS_LENGTHS},
                        "nsq_chunk": {0: N.POSITIONS}, "nsq_frame": {0: N.POSITIONS}}.get(name)
            if expected is None:
                return step

            def checked(*args):
                out = step(*args)
                for i, schema in expected.items():
                    assert pa.record_batch(out[i]).schema == schema, (name, i)
                seen.append(name)
                return out
            return checked

    rocketmq_samples.generate(str(tmp_path / "r"), 300, seed=7, file_size=64 << 10)
    nsq_samples.generate(str(tmp_path / "n"), 300, seed=7)
    for codec, root in ((RocketMqCommitLogCodec(native=True), "r"), (NsqExtCodec(native=True), "n")):
        codec._core = Checked(codec._core)
        decode_root(codec, str(tmp_path / root))
    assert {"rmq_chunk", "rmq_walk", "nsq_chunk"} <= set(seen)


@needs_native
@pytest.mark.parametrize("window", [N.MAP_WINDOW, 64 << 10])
def test_rocketmq_files_read_through_a_mapping_decode_as_copied_ones(tmp_path, monkeypatch, window):
    """The native path maps CommitLog files (``NativeCodec._mapped``): the same rows as chunks
    copied into a buffer, with windows that chunks straddle, a file that shrinks between chunks
    ending the read as a read does, and no mapping left once a decode call is done."""
    monkeypatch.setattr(N, "MAP_WINDOW", window)
    rocketmq_samples.generate(str(tmp_path), 1200, seed=7, file_size=512 << 10)

    def decode(maps: bool, chunk: int) -> pa.Table:
        codec = RocketMqCommitLogCodec(native=True, chunk_bytes=chunk)
        codec.maps_files = maps
        table = decode_root(codec, str(tmp_path)).table
        assert codec._window is None
        return table

    for chunk in (5000, 100_000):
        mapped, copied = decode(True, chunk), decode(False, chunk)
        assert mapped.num_rows > 1000 and mapped.equals(copied)

    codec = RocketMqCommitLogCodec(native=True, chunk_bytes=4000)
    seg = next(s for s in codec.scan(str(tmp_path)).segments if not s.whole_file)
    results = codec.decode(str(tmp_path), seg, 0, seg.committed_end)
    first = next(results)
    os.truncate(os.path.join(tmp_path, seg.path), 9000)
    rest = list(results)
    assert "shrank" in rest[-1].batch.to_pylist()[-1]["reason"]
    assert first.decoded_bytes + sum(r.decoded_bytes + r.quarantined_bytes for r in rest) == seg.committed_end
    assert codec._window is None


_hosts = st.sampled_from(["127.0.0.1:50000", "10.1.2.3:10911", "[::1]:10911", "[2408:4004:180::898a]:1",
                          "[::ffff:1.2.3.4]:7", "[1:0:0:2::3]:9"])
_props = st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "DELAY", "TIMER_DELIVER_MS", "TRAN_MSG", "TTL",
                                          "__SHARDINGKEY", "a", "caf\u00e9"]),
                         st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=6),
                         max_size=5)


@st.composite
def _rocketmq_messages(draw):
    out = []
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["plain", "plain", "batch", "compressed", "v2"]))
        m = Message("t" * draw(st.integers(1, 20)), draw(st.binary(max_size=80)), draw(_props),
                    queue_id=i % 3, born_host=draw(_hosts), store_host=draw(_hosts),
                    transaction=draw(st.sampled_from([0, 4, 8, 12])), crc32_trailer=draw(st.booleans()))
        if kind == "batch":
            m.inner = [Inner(draw(st.binary(max_size=20)), draw(_props)) for _ in range(draw(st.integers(1, 3)))]
        elif kind == "compressed":
            m.compression = draw(st.sampled_from(["zlib", "lz4", "zstd"]))
        elif kind == "v2":
            m.topic = "%RETRY%" + "g" * 130
        out.append(m)
    return out


@needs_native
@FAST
@given(messages=_rocketmq_messages(),
       flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3),
       chunk=st.sampled_from([300, 2048, 8 << 20]), crc=st.booleans(), decompress=st.booleans())
def test_rocketmq_generated_stores_with_corruption(messages, flips, chunk, crc, decompress):
    with tempfile.TemporaryDirectory() as root:
        with CommitLogWriter(root, 16 << 10) as w:
            for m in messages:
                w.put(m)
        files = sorted(os.listdir(os.path.join(root, "commitlog")))
        for at, value in flips:
            path = os.path.join(root, "commitlog", files[at % len(files)])
            fd = os.open(path, os.O_RDWR)
            os.pwrite(fd, bytes([value]), at % max(os.fstat(fd).st_size, 1))
            os.close(fd)
        assert_same(RocketMqCommitLogCodec, root, chunk_bytes=chunk, verifyCrc=crc, decompress=decompress)



@needs_native
def test_many_and_repeated_property_names(tmp_path):
    """More property names in a chunk than the core's name table holds (the rest go to its map),
    names of every length, a name twice in a message (the last value kept)."""
    with CommitLogWriter(str(tmp_path), 1 << 20) as w:
        for i in range(400):
            props = {"UNIQ_KEY": f"U{i}", "TAGS": "t", f"n{i % 90:02d}": "v", "p" * (1 + i % 40): str(i)}
            w.put(Message("orders", b"x", props, raw_properties=f"a\x01{i}\x02a\x01again\x02" if i % 7 == 0 else ""))
    table = assert_same(RocketMqCommitLogCodec, str(tmp_path))
    users = [dict(m) for m in table["properties"].to_pylist()]
    assert len(users) == 400 and users[7]["a"] == "again" and "a" not in users[8]
    assert {k for u in users for k in u} >= {"n00", "n89", "p", "p" * 40}


@needs_native
def test_random_bytes_give_the_same_rows(tmp_path):
    rng = random.Random(5)
    with CommitLogWriter(str(tmp_path), 64 << 10) as w:
        for i in range(40):
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
            w.put(Message("orders", body, {"UNIQ_KEY": f"U{i}"}))
            if i % 9 == 4:
                w.put_raw(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))))
            if i % 13 == 6:
                w.put_raw(struct.pack(">ii", 120, -626843481) + bytes(112))  # magic, lengths that do not add up
    assert_same(RocketMqCommitLogCodec, str(tmp_path))


@needs_native
def test_columns_cross_through_the_c_data_interface_in_their_schema_types(tmp_path):
    """A native step's batch is imported by pyarrow through the Arrow C Data Interface (the
    PyCapsule protocol) over the core's own buffers, and its unified-schema columns already have
    the schema's types: nothing is copied or cast on the way."""
    from msglake.formats.nsq_ext import frame_chunk
    from msglake.schemas.source import SOURCE_SCHEMA

    nsq_samples.generate(str(tmp_path / "nsq"), 300, bad_inputs=False)
    rocketmq_samples.generate(str(tmp_path / "rmq"), 300, bad_inputs=False)
    (segment,) = sorted((tmp_path / "nsq").glob("*/*.dat"))[:1]
    (commitlog,) = sorted((tmp_path / "rmq" / "commitlog").iterdir())[:1]
    nsq, rmq = NsqExtCodec(native=True), RocketMqCommitLogCodec(native=True)
    data = commitlog.read_bytes()
    rows = {"nsq-ext": frame_chunk(segment.read_bytes(), nsq._core)[1],
            "rocketmq-commitlog": rmq._frame(data, "0", 0, len(data), 0, len(data)).decoded.rows}
    for fmt, batch in rows.items():
        assert batch is not None and batch.num_rows > 0, fmt
        shared = [name for name in batch.schema.names if name in SOURCE_SCHEMA.names]
        assert len(shared) >= 18, (fmt, shared)
        for name in shared:
            assert batch.column(name).type == SOURCE_SCHEMA.field(name).type, (fmt, name)
    # A chunk's rows come whole, the chunk's constants and (RocketMQ) compression included, as a
    # source batch: the columns a message leaves null included.
    rmq_rows = rows["rocketmq-commitlog"]
    assert rmq_rows.schema.equals(SOURCE_SCHEMA) and rows["nsq-ext"].schema.equals(SOURCE_SCHEMA)
    assert all(rmq_rows.column(name).null_count == rmq_rows.num_rows for name in ("searchKey", "reason", "rawBytes"))
    own = {"topic", "partition", "sourceFormat", "segment", "segmentPosition", "queueOffset", "storeTimestamp",
           "storeHost", "priority", "durability", "deliveryCount", "body", "bodySize", "recordLength", "systemCopy"}
    assert own <= set(rows["nsq-ext"].schema.names), own - set(rows["nsq-ext"].schema.names)
    at = nsq._core.gather(data, np.array([0, 8], np.int64), np.array([4, 12], np.int64))
    assert hasattr(at, "__arrow_c_array__")
    one, two = N.arrow(at).column("values"), N.arrow(at).column("values")
    assert one.to_pylist() == [data[0:4], data[8:12]]
    assert one.buffers()[2].address == two.buffers()[2].address  # both lie over the core's buffer


@needs_native
def test_a_layout_arranges_a_batch_and_refuses_what_does_not_fit(tmp_path):
    """A step given a ``Layout`` returns its columns in the layout's fields: one it did not make
    is all null; a column the layout lacks, or of a type the layout does not have, is an error
    that names the column (a misnamed column must not pass as a null one)."""
    from msglake.formats import rocketmq_commitlog as R
    from msglake.schemas.source import SOURCE_SCHEMA

    rocketmq_samples.generate(str(tmp_path), 50, bad_inputs=False)
    (commitlog,) = sorted((tmp_path / "commitlog").iterdir())[:1]
    data = commitlog.read_bytes()
    codec = RocketMqCommitLogCodec(native=True)
    core = codec._core

    def rows(schema):
        out = core.rmq_chunk(data, 0, len(data), len(data), 0, len(data), 0, R._chunk_constants("0"), R._CODEC_LIST,
                             True, False, codec.delay_levels.tolist(), *R._NATIVE_RULES, core.Layout(schema))
        return N.arrow_as(out[6], schema)

    wider = SOURCE_SCHEMA.insert(3, pa.field("nothing", pa.int64()))
    got = rows(wider)
    assert got.schema.equals(wider) and got.num_rows > 0
    assert got.column("nothing").null_count == got.num_rows and got.column("topic").null_count == 0
    with pytest.raises(ValueError, match="column topic is Utf8, the layout's field is Int64"):
        rows(SOURCE_SCHEMA.set(SOURCE_SCHEMA.get_field_index("topic"), pa.field("topic", pa.int64())))
    with pytest.raises(ValueError, match="column body is not in the layout"):
        rows(SOURCE_SCHEMA.remove(SOURCE_SCHEMA.get_field_index("body")))


@needs_native
def test_without_pyarrows_private_import_the_capsule_protocol_gives_the_same_batches(tmp_path, monkeypatch):
    """``arrow_as`` imports with the schema object through a private pyarrow method; a pyarrow
    without it gets the same batches through the PyCapsule protocol."""
    rocketmq_samples.generate(str(tmp_path / "rmq"), 200, bad_inputs=False)
    nsq_samples.generate(str(tmp_path / "nsq"), 200, bad_inputs=False)
    cases = [(RocketMqCommitLogCodec, tmp_path / "rmq"), (NsqExtCodec, tmp_path / "nsq")]
    fast = [decode_root(cls(native=True), str(root)).table for cls, root in cases]
    monkeypatch.setattr(N, "_IMPORT_WITH_SCHEMA", None)
    for (cls, root), table in zip(cases, fast):
        assert decode_root(cls(native=True), str(root)).table.equals(table, check_metadata=True)
