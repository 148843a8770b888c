"""NSQ extended-segment decoder: spec vectors, round trips, bad input."""
from __future__ import annotations

import importlib.util
import os
import random
import struct
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

from msglake.formats import nsq_layout as L
from msglake.formats.base import SegmentInfo, decode_root
from msglake.formats.nsq_ext import MAX_POSSIBLE_MSG_SIZE, NsqExtCodec, frame, last_boundary
from msglake.formats.nsq_headers import HeaderError, header_columns, load_header
from msglake.samples.nsq import generate
from msglake.samples.nsq_writer import NsqQueueWriter, encode_message

TS = 1_793_500_000_123_456_789


def decode(root, **kw):
    return decode_root(NsqExtCodec(**kw), str(root))


def rows(result):
    return result.messages.to_pylist()


def reasons(result):
    return [(r["segment"], r["segmentPosition"], r["recordLength"], r["reason"]) for r in result.quarantined.to_pylist()]


# --------------------------------------------------------------------------- spec vectors


def test_spec_47_byte_ext_record_layout(tmp_path):
    # kv_topic_test.go: version-4 ext "tes<i>" (not JSON), 10 zero-byte body -> 47 bytes framed.
    msg = encode_message(bytes(10), timestamp_ns=TS, message_id=1, trace_id=1, ext_version=4, ext_data=b"tes0")
    framed = struct.pack(">i", len(msg)) + msg
    assert len(framed) == 47
    fr = frame(framed, 0, len(framed))
    assert fr.positions.tolist() == [0] and fr.lengths.tolist() == [43] and fr.stop_kind == "end"
    assert framed[4 + 8 : 4 + 10] == b"\xa0\x00"  # attempts 0 + the ext flag
    assert framed[30] == 4 and framed[31:33] == b"\x00\x04" and framed[33:37] == b"tes0"
    assert framed[37:] == bytes(10)
    # The disk layer accepts any ext bytes; the lake cannot map "tes0" to headers, so the
    # record is quarantined whole, with its 47 raw bytes.
    with NsqQueueWriter(str(tmp_path), "kv", 0) as w:
        w.put_raw(framed)
    result = decode(tmp_path)
    assert result.messages.num_rows == 0
    [q] = result.quarantined.to_pylist()
    assert q["rawBytes"] == framed and q["recordLength"] == 47 and "not valid JSON" in q["reason"]


def test_spec_47_byte_layout_with_a_json_ext_decodes(tmp_path):
    with NsqQueueWriter(str(tmp_path), "kv", 0) as w:
        rec = w.put(bytes(10), header=b'{"a":1}', trace_id=1, timestamp_ns=TS)
    assert rec.framed_size == 47 + 3
    [row] = rows(decode(tmp_path))
    assert row["body"] == bytes(10) and row["bodySize"] == 10 and row["traceId"] == "1"
    assert row["properties"] == [("a", "1")]


def test_writer_roll_vector_from_nsqd_tests(tmp_path):
    # TestDiskQueueWriterRoll: limit 9*(10+4)=126, ten 10-byte messages.
    w = NsqQueueWriter(str(tmp_path), "roll", 0, max_bytes_per_file=126)
    for i in range(10):
        w.put_raw(struct.pack(">i", 10) + bytes([i]) * 10)
    w.close()
    d = tmp_path / "roll"
    assert os.path.getsize(d / "roll-0.diskqueue.000000.dat") == 126
    assert os.path.getsize(d / "roll-0.diskqueue.000001.dat") == 14
    assert L.parse_offset_meta((d / "roll-0.diskqueue.000000.dat.offsetmeta.dat").read_bytes()) == L.OffsetMeta(9, 0, 126)
    meta = L.parse_writer_meta((d / "roll-0.diskqueue.meta.writer.dat").read_bytes())
    assert (meta.file_num, meta.pos, meta.virtual_end, meta.total_count) == (1, 14, 140, 10)
    segs = {s.segment: s for s in NsqExtCodec().scan(str(tmp_path)).segments}
    assert segs["roll-0.diskqueue.000001.dat"].start_virtual == 126


# --------------------------------------------------------------------------- round trips


def test_round_trip_every_header_kind(tmp_path):
    header = {
        "##trace_id": "18446744073709551615",
        "##client_dispatch_tag": "paid",
        "bornTimestamp": 1793500000000,
        "bornHost": "10.1.2.3:40000",
        "priority": 9,
        "durability": 1,
        "searchKey": "sk",
        "delayTime": 5000,
        "startDeliverTime": "1793500005000",
        "expireTime": 1793500600000,
        "transactionId": "tx-1",
        "correlationId": "corr-1",
        "shardingKey": "user-7",
        "keys": "k1 k2  k3",
        "nsq.client.compress": "3",
        "nsq.msg.size": "42",
        "zan_test": True,
        "app": "shop",
        "nested": {"a": [1, 2]},
    }
    with NsqQueueWriter(str(tmp_path), "t", 3) as w:
        w.put(b"legacy", ext=False, timestamp_ns=TS, attempts=2)
        w.put(b"plain", timestamp_ns=TS + 1)
        w.put(b"traced", trace_id=77, timestamp_ns=TS + 2)
        w.put(b"tagged", tag="T_1-x", timestamp_ns=TS + 3)
        w.put(b"empty-tag", tag="", timestamp_ns=TS + 4)
        w.put(b"full", header=header, timestamp_ns=TS + 5)
        w.put(b"otel", header={"traceId": "otel-1", "##trace_id": "5", "messageKey": "mk", "shardingKey": "no"},
              timestamp_ns=TS + 6)
        w.put(b"", header={"keys": ["a", "b"]}, timestamp_ns=TS + 7)
    out = rows(decode(tmp_path, storeHost="10.9.9.9:4150"))
    assert [r["body"] for r in out] == [b"legacy", b"plain", b"traced", b"tagged", b"empty-tag", b"full", b"otel", b""]
    assert all(r["topic"] == "t" and r["partition"] == 3 and r["sourceFormat"] == "nsq_ext" for r in out)
    assert all(r["storeHost"] == "10.9.9.9:4150" for r in out)
    assert [r["messageId"] for r in out] == [str(i) for i in range(1, 9)]
    assert out[0]["deliveryCount"] == 2 and out[1]["deliveryCount"] == 0
    assert out[0]["storeTimestamp"].timestamp() == pytest.approx(TS / 1e9, abs=1e-6)
    assert [r["traceId"] for r in out[:5]] == [None, None, "77", None, None]
    assert out[3]["tags"] == "T_1-x" and out[4]["tags"] is None
    assert [r["priority"] for r in out[:5]] == [5] * 5 and [r["headers"] for r in out[:5]] == [[]] * 5
    full = out[5]
    assert full["traceId"] == "18446744073709551615" and full["tags"] == "paid"
    assert full["bornTimestamp"].timestamp() == 1793500000.0 and full["bornHost"] == "10.1.2.3:40000"
    assert (full["priority"], full["durability"], full["searchKey"], full["delayTime"]) == (9, 1, "sk", 5000)
    assert full["startDeliverTime"].timestamp() == 1793500005.0 and full["expireTime"].timestamp() == 1793500600.0
    assert (full["transactionId"], full["correlationId"], full["messageKey"]) == ("tx-1", "corr-1", "user-7")
    assert full["keys"] == ["k1", "k2", "k3"] and full["compression"] == "lz4"
    assert dict(full["properties"]) == {"zan_test": "true", "app": "shop", "nested": '{"a":[1,2]}'}
    assert dict(full["headers"])["##trace_id"] == "18446744073709551615"
    assert set(dict(full["headers"])) == set(header)
    otel = out[6]
    assert otel["traceId"] == "otel-1" and otel["messageKey"] == "mk"
    assert out[7]["keys"] == ["a", "b"] and out[7]["bodySize"] == 0
    offsets = [r["queueOffset"] for r in out]
    assert offsets == [r["segmentPosition"] for r in out] and offsets[0] == 0


def test_header_values_of_the_wrong_type_leave_the_column_empty_but_keep_the_header(tmp_path):
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        w.put(b"x", header={"priority": "high", "bornTimestamp": "yesterday", "expireTime": -5, "delayTime": 1.5})
    [r] = rows(decode(tmp_path))
    assert r["priority"] == 5 and r["bornTimestamp"] is None and r["expireTime"] is None and r["delayTime"] is None
    assert dict(r["headers"])["priority"] == "high"


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [(b"tes0", "not valid JSON"), (b"[1]", "not an object"), (b'"s"', "not an object"),
     (b'{"##trace_id":12}', "decimal uint64"), (b'{"##trace_id":"-1"}', "decimal uint64"),
     (b'{"##trace_id":"18446744073709551616"}', "decimal uint64"), (b'{"##trace_id":"\xc2\xb2"}', "decimal uint64"),
     (b"", "not valid JSON")],
)
def test_load_header_rejects(raw, fragment):
    with pytest.raises(HeaderError, match=fragment):
        load_header(raw)


def test_compression_codes():
    docs = [{"nsq.client.compress": c} for c in ("1", "2", "3", 9)] + [{}]
    assert header_columns(docs)["compression"].to_pylist() == ["gzip", "snappy", "lz4", "unknown:9", None]


def test_mixed_value_types_in_one_column_take_the_exact_path():
    docs = [{"priority": 3}, {"priority": "7"}, {"priority": 2.0}, {"priority": 2.5}, {"priority": True},
            {"priority": 1 << 40}, {"delayTime": 1 << 70}, {"bornHost": 5}, {"traceId": (1 << 64) - 1}]
    cols = header_columns(docs)
    assert cols["priority"].to_pylist() == [3, 7, 2, None, None, None, None, None, None]
    assert cols["delayTime"].to_pylist()[6] is None and cols["bornHost"].to_pylist()[7] == "5"
    assert cols["traceId"].to_pylist()[8] == "18446744073709551615"  # nsqd accepts any JSON value


# --------------------------------------------------------------------------- bad input


def _queue_with(tmp_path, raw: bytes, topic="bad", good_after=True):
    with NsqQueueWriter(str(tmp_path), topic, 0) as w:
        w.put(b"before", timestamp_ns=TS)
        w.put_raw(raw)
        if good_after:
            w.put(b"after", timestamp_ns=TS)
    return decode(tmp_path)


def _ext_record(version: int, ext: bytes, body=b"body", length_field=None) -> bytes:
    msg = encode_message(body, timestamp_ns=TS, message_id=9, ext_version=version, ext_data=ext)
    if length_field is not None:
        msg = msg[:27] + struct.pack(">H", length_field) + msg[29:]
    return struct.pack(">i", len(msg)) + msg


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (_ext_record(7, b"{}"), "unknown ext version 7"),
        (_ext_record(4, b"{}", length_field=400), "runs past the record end"),
        (_ext_record(4, b"not json"), "not valid JSON"),
        (_ext_record(4, b"[1,2]"), "not an object"),
        (_ext_record(4, b'{"##trace_id":7}'), "##trace_id"),
        (struct.pack(">i", 5) + b"short", "below the 26-byte minimum"),
        (struct.pack(">i", 26) + struct.pack(">qHQQ", TS, 0xA000, 1, 0), "before the ext version byte"),
        (struct.pack(">i", 28) + struct.pack(">qHQQ", TS, 0xA000, 1, 0) + b"\x04\x00", "inside the ext length"),
        (struct.pack(">i", 30) + struct.pack(">qHQQ", TS, 0xB000, 1, 0) + b"body", "reserved high nibble"),
    ],
)
def test_a_bad_record_is_quarantined_and_its_neighbours_decode(tmp_path, raw, fragment):
    result = _queue_with(tmp_path, raw)
    assert [r["body"] for r in rows(result)] == [b"before", b"after"]
    [q] = result.quarantined.to_pylist()
    assert fragment in q["reason"] and q["rawBytes"] == raw and q["recordLength"] == len(raw)
    assert q["topic"] == "bad" and q["partition"] == 0 and q["segmentPosition"] == 4 + 26 + 1 + len(b"before")


@pytest.mark.parametrize("prefix", [0, -1, -(1 << 31), (1 << 28) + 1, 0x7FFFFFFF])
def test_impossible_length_prefix_quarantines_the_rest_of_committed_data(tmp_path, prefix):
    junk = struct.pack(">i", prefix) + b"\xff" * 100
    result = _queue_with(tmp_path, junk)
    assert [r["body"] for r in rows(result)] == [b"before"]
    [q] = result.quarantined.to_pylist()
    assert f"invalid length prefix {prefix}" in q["reason"]
    assert q["rawBytes"].startswith(junk) and q["recordLength"] == len(junk) + 4 + 26 + 1 + 5  # + the "after" record


def test_truncated_tail_past_the_writer_meta_is_pending_not_quarantined(tmp_path):
    with NsqQueueWriter(str(tmp_path), "live", 0) as w:
        w.put(b"one", timestamp_ns=TS)
        seg = os.path.join(w.dir, w.segment)
    with open(seg, "ab") as f:
        f.write(struct.pack(">i", 64) + b"\x00" * 20)
    result = decode(tmp_path)
    [s] = result.scan.segments
    assert s.committed_end == 4 + 27 + 3 and s.file_size == s.committed_end + 24 and not s.sealed
    assert [r["body"] for r in rows(result)] == [b"one"] and result.quarantined.num_rows == 0


def test_truncated_record_inside_a_closed_segment_is_quarantined(tmp_path):
    w = NsqQueueWriter(str(tmp_path), "cut", 0, max_bytes_per_file=1 << 20)
    w.put(b"one", timestamp_ns=TS)
    w.put_raw(struct.pack(">i", 64) + b"\x00" * 20)
    w.roll()
    w.put(b"two", timestamp_ns=TS)
    w.close()
    result = decode(tmp_path)
    assert [r["body"] for r in rows(result)] == [b"one", b"two"]
    [q] = reasons(result)
    assert q[0] == "cut-0.diskqueue.000000.dat" and q[2] == 24 and "truncated record" in q[3]


def test_missing_meta_reads_complete_records_and_leaves_the_partial_tail(tmp_path):
    with NsqQueueWriter(str(tmp_path), "nm", 0, max_bytes_per_file=100) as w:
        for i in range(6):
            w.put(b"m%d" % i + b"." * 30, timestamp_ns=TS)
    for name in os.listdir(tmp_path / "nm"):
        if ".meta." in name or name.endswith("offsetmeta.dat"):
            os.remove(tmp_path / "nm" / name)
    last = sorted(os.listdir(tmp_path / "nm"))[-1]
    with open(tmp_path / "nm" / last, "ab") as f:
        f.write(b"\x00\x00")
    result = decode(tmp_path)
    assert len(rows(result)) == 6 and result.quarantined.num_rows == 0
    assert any("no writer meta" in n for n in result.scan.notes)
    assert all(r["queueOffset"] is None for r in rows(result))
    live = [s for s in result.scan.segments if s.segment == last][0]
    assert live.file_size - live.committed_end == 2


def test_unreadable_writer_meta_falls_back_to_tmp(tmp_path):
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        w.put(b"x", timestamp_ns=TS)
        meta = L.writer_meta_path(w.dir, "t-0")
    with open(meta, "wb") as f:
        f.write(b"garbage")
    result = decode(tmp_path)
    assert len(rows(result)) == 1
    assert any("unreadable writer meta" in n for n in result.scan.notes)


def test_empty_segment_and_empty_topic_folder(tmp_path):
    NsqQueueWriter(str(tmp_path), "empty", 0).close()
    os.makedirs(tmp_path / "no-files")
    result = decode(tmp_path)
    assert result.table.num_rows == 0
    [s] = result.scan.segments
    assert s.file_size == 0 and s.committed_end == 0


def test_names_that_do_not_parse(tmp_path):
    with NsqQueueWriter(str(tmp_path), "bad topic!", 0) as w:
        w.put(b"x", timestamp_ns=TS)
    with NsqQueueWriter(str(tmp_path), "other", 0) as w:
        w.put(b"y", timestamp_ns=TS)
    os.rename(tmp_path / "other", tmp_path / "misplaced")
    (tmp_path / "misplaced" / "misplaced-0.diskqueue.00x.dat").write_bytes(b"\x00\x00\x00\x01z")
    (tmp_path / "misplaced" / "README.txt").write_text("not a segment")
    result = decode(tmp_path)
    assert rows(result) == []
    got = sorted((q[0], q[3].split(" ")[0]) for q in reasons(result))
    assert got == [("bad topic!-0.diskqueue.000000.dat", "topic"), ("misplaced-0.diskqueue.00x.dat", "segment"),
                   ("other-0.diskqueue.000000.dat", "queue")]
    assert result.scan.ignored == {"misplaced/README.txt": "not an NSQ disk-queue file"}
    assert result.scan.ignored_bytes == len("not a segment")


def test_files_outside_the_layout_are_listed_with_their_bytes_not_skipped_silently(tmp_path):
    with NsqQueueWriter(str(tmp_path), "orders", 0) as w:
        w.put(b"x", timestamp_ns=TS)
    nested = tmp_path / "orders" / "nest" / "sub"
    nested.mkdir(parents=True)
    (nested / "orders-0.diskqueue.000000.dat").write_bytes(b"\x00" * 7938)  # looks like a segment, but nested
    (tmp_path / "stray.dat").write_bytes(b"12345")
    result = decode(tmp_path)
    assert len(rows(result)) == 1  # the real segment is read as before
    assert result.scan.ignored == {
        "orders/nest/sub/orders-0.diskqueue.000000.dat": "in a folder nested in a topic folder (nsqd writes none)",
        "stray.dat": "not in a topic folder"}
    assert result.scan.ignored_bytes == 7938 + 5
    assert all("nest" not in s.path for s in result.scan.segments)


def test_source_root_that_is_not_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        NsqExtCodec().scan(str(tmp_path / "absent"))


# --------------------------------------------------------------------------- whole data paths


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("nsq")
    truth = generate(str(root), 4000, max_bytes_per_file=256 << 10)
    return str(root), truth


def test_generated_data_path_matches_ground_truth(sample):
    root, truth = sample
    result = decode(root)
    got = {(r["topic"], r["partition"], r["segment"], r["segmentPosition"]): r for r in rows(result)}
    want = truth.by_key()
    assert set(got) == set(want)
    for key, m in want.items():
        r = got[key]
        assert (r["messageId"], r["body"], r["traceId"], r["tags"], r["priority"]) == (
            m.message_id, m.body, m.trace_id, m.tags, m.priority), key
        if r["queueOffset"] is not None:
            assert r["queueOffset"] == m.virtual_offset
    assert sorted((q[0], q[1]) for q in reasons(result)) == sorted((q.segment, q.position) for q in truth.quarantined)
    for seg, pos, length, reason in reasons(result):
        [exp] = [q for q in truth.quarantined if (q.segment, q.position) == (seg, pos)]
        assert exp.reason in reason and (length == exp.length or "framing is lost" in reason)


def test_every_byte_on_disk_is_decoded_quarantined_or_pending(sample):
    root, truth = sample
    result = decode(root)
    on_disk = sum(s.file_size for s in result.scan.segments)
    pending = sum(s.file_size - s.committed_end for s in result.scan.segments)
    assert pending == truth.pending_bytes
    assert result.decoded_bytes + result.quarantined_bytes + pending == on_disk
    assert result.decoded_bytes == sum(result.messages["recordLength"].to_pylist())


@pytest.mark.parametrize("chunk", [64, 1000, 4097])
def test_small_chunks_decode_the_same_as_one_pass(sample, chunk):
    root, _ = sample
    whole = decode(root).table.drop_columns(["storeHost"])
    chunked = decode(root, chunk_bytes=chunk).table.drop_columns(["storeHost"])
    key = [("segment", "ascending"), ("segmentPosition", "ascending")]
    assert chunked.sort_by(key).equals(whole.sort_by(key))


def test_split_points_and_advance_land_on_record_boundaries(sample):
    root, _ = sample
    codec = NsqExtCodec()
    seg = max((s for s in codec.scan(root).segments if s.problem is None), key=lambda s: s.committed_end)
    boundaries = set(frame(open(os.path.join(root, seg.path), "rb").read(), 0, seg.committed_end).positions.tolist())
    cuts = codec.split_points(root, seg, 0, seg.committed_end, 10_000)
    assert cuts and all(c in boundaries for c in cuts) and cuts == sorted(cuts)
    stop, n = codec.advance(root, seg, 0, seg.committed_end, 5_000, None)
    assert stop in boundaries and 0 < stop <= 5_000 and n > 0
    stop, n = codec.advance(root, seg, 0, seg.committed_end, None, 3)
    assert n == 3 and stop in boundaries
    stop, n = codec.advance(root, seg, 0, seg.committed_end, 1, None)  # one record even over budget
    assert n == 1 and stop > 1


#: Both paths where the native core is built.
PATHS = [False, pytest.param(True, marks=pytest.mark.skipif(importlib.util.find_spec("msglake_native") is None,
                                                             reason="the native core is not built"))]


def _walk_record_by_record(data: bytes, start: int, end: int, every: int | None = None):
    """The planning walk's rules, one length prefix at a time over the whole file: (stop, kind, cuts)."""
    end = min(end, len(data))
    pos, mark, cuts = start, start, []
    while pos + 4 <= end:
        n = struct.unpack_from(">i", data, pos)[0]
        if n <= 0 or n > MAX_POSSIBLE_MSG_SIZE:
            return pos, "broken", cuts
        if pos + 4 + n > end:
            return pos, "incomplete", cuts
        pos += 4 + n
        if every is not None and pos - mark >= every and pos < end:
            cuts.append(pos)
            mark = pos
    return pos, ("end" if pos == end else "incomplete"), cuts


def _advance_record_by_record(data: bytes, start: int, end: int, max_bytes, max_records):
    limit = min(end, len(data))
    pos, count = start, 0
    while pos + 4 <= limit:
        n = struct.unpack_from(">i", data, pos)[0]
        nxt = pos + 4 + n
        if n <= 0 or n > MAX_POSSIBLE_MSG_SIZE or nxt > limit:
            return end, count + 1
        if count > 0 and ((max_bytes is not None and nxt - start > max_bytes)
                          or (max_records is not None and count >= max_records)):
            return pos, count
        pos, count = nxt, count + 1
    return (end, count + 1) if pos < limit else (pos, count)


def _random_segment(rng: random.Random) -> bytes:
    """Length-prefixed records (some longer than the walks' small windows), then one of the tails
    a live or damaged segment has: none, a record cut short, a cut length prefix, a prefix no
    writer produces."""
    out = b"".join(struct.pack(">i", n) + rng.randbytes(n)
                   for n in (rng.choice([1, 7, 60, 300, 5000]) for _ in range(rng.randrange(0, 25))))
    tail = rng.choice(["none", "cut record", "cut prefix", "broken"])
    if tail == "cut record":
        out += struct.pack(">i", 900) + rng.randbytes(rng.randrange(0, 900))
    elif tail == "cut prefix":
        out += struct.pack(">i", 12)[: rng.randrange(1, 4)]
    elif tail == "broken":
        out += struct.pack(">i", rng.choice([0, -5, MAX_POSSIBLE_MSG_SIZE + 1])) + rng.randbytes(20)
    return out


@pytest.mark.parametrize("native", PATHS)
def test_planning_walks_read_in_windows_agree_with_a_walk_one_record_at_a_time(tmp_path, native):
    # The walks read a window at a time; records longer than a window and records cut at a
    # window's end must give the answers of one walk over the whole file, on both paths.
    rng = random.Random(7)
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / "t.diskqueue.000000.dat"
    for _ in range(40):
        data = _random_segment(rng)
        path.write_bytes(data)
        seg = SegmentInfo("t/" + path.name, path.name, "t", 0, len(data), True, None, len(data))
        inner = [0] + [p for p in _walk_record_by_record(data, 0, len(data), 1)[2]]
        for window in (4, 9, 64, 700, 1 << 20):
            codec = NsqExtCodec(native=native, chunk_bytes=window)
            for start in {0, rng.choice(inner)}:
                for end in {len(data), rng.randrange(start, len(data) + 1), len(data) + 50}:
                    stop, kind, _ = _walk_record_by_record(data, start, end)
                    if end > start:
                        assert last_boundary(str(path), start, end, codec._core, window) == (stop, kind)
                    for target in (1, 50, 1000):
                        want = [] if end - start <= target else _walk_record_by_record(data, start, end, target)[2]
                        assert codec.split_points(str(tmp_path), seg, start, end, target) == want
                    for budget in ((1, None), (None, 3), (400, 2), (6000, None), (None, None), (None, 0)):
                        assert (codec.advance(str(tmp_path), seg, start, end, *budget)
                                == _advance_record_by_record(data, start, end, *budget)), (window, start, end, budget)


@pytest.mark.parametrize("native", PATHS)
def test_a_long_broken_region_is_quarantined_a_chunk_at_a_time(tmp_path, native):
    # Framing lost near the start of a 5 MiB segment: the rest is quarantined in reads of about
    # a chunk, never held whole (it was one read and one batch, however large the region), and
    # its rows (1 MiB each, cut from the region's start) do not depend on the chunk size.
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        w.put(b"ok", timestamp_ns=TS)
        w.put_raw(struct.pack(">i", 0) + random.Random(3).randbytes(5 << 20))
    rows = []
    for chunk in (1 << 20, 2 << 20, 8 << 20):
        codec = NsqExtCodec(native=native, chunk_bytes=chunk)
        [seg] = codec.scan(str(tmp_path)).segments
        results = list(codec.decode(str(tmp_path), seg, 0, seg.committed_end))
        assert max(sum(len(r or b"") for r in res.batch["rawBytes"].to_pylist()) for res in results) <= chunk
        assert sum(res.decoded_bytes + res.quarantined_bytes for res in results) == seg.committed_end
        out = pa.Table.from_batches([res.batch for res in results])
        rows.append(out.select(["segmentPosition", "recordLength", "reason"]).to_pylist())
    assert rows[0] == rows[1] == rows[2]
    assert len(rows[0]) == 1 + 6 and rows[0][1]["reason"].startswith("invalid length prefix 0")


_SHRINKING_WALKER = """
import sys, time
from msglake.formats.base import SegmentInfo
from msglake.formats.nsq_ext import NsqExtCodec, last_boundary
root, name, size, native = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
codec = NsqExtCodec(native=native)
seg = SegmentInfo("t/" + name, name, "t", 0, size, False, None, size)
until = time.monotonic() + float(sys.argv[5])
while time.monotonic() < until:
    last_boundary(f"{root}/t/{name}", 0, size, codec._core)
    codec.split_points(root, seg, 0, size, 1 << 20)
    codec.advance(root, seg, 0, size, None, None)
print("walked")
"""


@pytest.mark.parametrize("native", PATHS)
def test_a_segment_that_shrinks_under_the_planning_walks_does_not_kill_the_process(tmp_path, native):
    # A live segment can shrink (a youzan nsqd rolls back uncommitted writes). Walked through a
    # mapping, a page past the new end killed the process with SIGBUS (returncode -7, every run
    # of this test on the code before); the walks must only see a shorter file.
    one = struct.pack(">i", 500) + bytes(500)
    data = one * 40_000  # 20 MB
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / "t.diskqueue.000000.dat"
    path.write_bytes(data)
    walker = subprocess.Popen([sys.executable, "-c", _SHRINKING_WALKER, str(tmp_path), path.name, str(len(data)),
                               "1" if native else "0", "1.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    half = len(data) // 2
    while walker.poll() is None:
        os.truncate(path, half)
        time.sleep(0.002)
        with open(path, "r+b") as f:
            f.seek(half)
            f.write(data[half:])
        time.sleep(0.005)
    out, err = walker.communicate()
    assert (walker.returncode, out.strip()) == (0, b"walked"), err.decode()[-2000:]


def test_gather_is_a_view_of_the_right_bytes():
    from msglake.formats.base import gather_slices

    buf = np.frombuffer(b"0123456789abcdef", np.uint8)
    off, data = gather_slices(buf, np.array([1, 5, 5, 10]), np.array([3, 5, 8, 16]))
    assert off.tolist() == [0, 2, 2, 5, 11] and data.tobytes() == b"12567abcdef"


def test_a_segment_that_shrinks_while_read_reports_the_missing_bytes(tmp_path):
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        for i in range(5):
            w.put(b"m%d" % i, timestamp_ns=TS)
    codec = NsqExtCodec()
    [seg] = codec.scan(str(tmp_path)).segments
    path = tmp_path / "t" / seg.segment
    os.truncate(path, 2 * 33)  # two records stay
    out = pa.Table.from_batches([r.batch for r in codec.decode(str(tmp_path), seg, 0, seg.committed_end)])
    assert out.filter(pa.compute.is_null(out["reason"])).num_rows == 2
    [loss] = out.filter(pa.compute.is_valid(out["reason"])).to_pylist()
    assert (loss["segmentPosition"], loss["recordLength"]) == (66, seg.committed_end - 66)
    assert "shrank" in loss["reason"]
