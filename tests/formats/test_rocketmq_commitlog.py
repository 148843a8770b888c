"""RocketMQ CommitLog decoder: a real broker file, the spec's vectors, round trips, bad input."""
from __future__ import annotations

import os
import shutil
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest

from msglake.formats import rocketmq_layout as L
from msglake.formats.base import decode_root
from msglake.formats.rocketmq_commitlog import RocketMqCommitLogCodec, walk
from msglake.samples.rocketmq import generate
from msglake.samples.rocketmq_writer import CommitLogWriter, Inner, Message, encode_record

#: Real broker files kept as test vectors (tests/data/*/README.md says where each comes from).
REAL = os.path.join(os.path.dirname(__file__), "..", "data", "rocketmq")
REAL_FILE = os.path.join(REAL, "00000000000000000000")


def decode(root, **kw):
    return decode_root(RocketMqCommitLogCodec(**kw), str(root))


def rows(result):
    return result.messages.to_pylist()


def one(store, m: Message, **kw) -> dict:
    with CommitLogWriter(str(store), 64 << 10) as w:
        w.put(m)
    [row] = rows(decode(store, **kw))
    return row


# --------------------------------------------------------------------------- a real broker's file


@pytest.fixture
def real_store(tmp_path):
    os.makedirs(tmp_path / "commitlog")
    shutil.copy(REAL_FILE, tmp_path / "commitlog")
    return tmp_path


def test_real_broker_file_decodes_to_its_documented_contents(real_store):
    result = decode(real_store)
    out = rows(result)
    assert len(out) == 47 and result.quarantined.num_rows == 0
    assert result.decoded_bytes == 47 * 172 and result.padding_bytes == 108  # the blank at 8084
    for i, r in enumerate(out):
        assert (r["topic"], r["partition"], r["queueOffset"]) == ("abc", 0, i)
        assert r["segmentPosition"] == r["physicalOffset"] == i * 172
        assert (r["sysFlag"], r["deliveryCount"], r["flag"]) == (0, 0, 0)
        assert (r["bornHost"], r["storeHost"]) == ("127.0.0.1:0", "192.168.71.1:8123")
        assert r["body"] == b"Once, there was a chance for me!" and r["bodyCrc"] == 151131488
        born_ms = int(r["bornTimestamp"].timestamp() * 1000)
        assert abs(born_ms - 1632821159368) < 60_000
        assert dict(r["headers"]) == {"0": "imagoodperson0", "KEYS": str(born_ms), "TAGS": "TAG1"}
        assert dict(r["properties"]) == {"0": "imagoodperson0"}
        assert (r["tags"], r["keys"], r["messageType"], r["systemCopy"]) == ("TAG1", [str(born_ms)], "NORMAL", False)
        assert r["messageId"] == L.offset_message_id(L.host_bytes("192.168.71.1:8123"), i * 172)


def test_our_encoder_writes_the_broker_bytes_exactly(real_store):
    with open(REAL_FILE, "rb") as f:
        data = f.read()
    for r in rows(decode(real_store)):
        m = Message(
            r["topic"], r["body"], dict(r["headers"]), queue_id=r["partition"],
            born_timestamp=int(r["bornTimestamp"].timestamp() * 1000),
            store_timestamp=int(r["storeTimestamp"].timestamp() * 1000),
            born_host=r["bornHost"], store_host=r["storeHost"],
        )
        record, _ = encode_record(m, r["physicalOffset"], r["queueOffset"])
        assert record == data[r["segmentPosition"] : r["segmentPosition"] + 172]
    assert struct.unpack_from(">ii", data, 8084) == (108, L.MAGIC_BLANK)


BATCH_FILE = os.path.join(os.path.dirname(__file__), "..", "data", "rocketmq-batch", "00000000000004670700")
BATCH_UNIQ_KEY = "FD0000000000000000000000000000023A2430946E0979CA00870B68"  # what RocketMQ's decoder reports


def test_real_batch_send_members_keep_their_own_unique_ids(tmp_path):
    shutil.copy(BATCH_FILE, tmp_path)
    out = rows(decode(tmp_path))
    assert [(r["physicalOffset"], r["partition"], r["queueOffset"], r["uniqueId"], r["keys"], dict(r["headers"])["seq"])
            for r in out] == [(4670700, 1, 0, BATCH_UNIQ_KEY, ["bk-0-0", "bk2-0"], "0"),
                              (4671072, 1, 1, BATCH_UNIQ_KEY, ["bk-0-1", "bk2-1"], "1")]
    assert [r["producerUniqueId"] for r in out] == ["FD0000000000000000000000000000023A2430946E0979CA00870B04",
                                                    "FD0000000000000000000000000000023A2430946E0979CA00870B05"]
    # Our encoder writes the broker's bytes: each message's properties, then the batch's appended.
    data = open(BATCH_FILE, "rb").read()
    batch = {"MSG_REGION": "DefaultRegion", "UNIQ_KEY": BATCH_UNIQ_KEY, "CLUSTER": "DefaultCluster", "WAIT": "true",
             "TRACE_ON": "true"}
    written = 0
    for k, r in enumerate(out):
        own = {"KEYS": f"bk-0-{k} bk2-{k}", "batch": "0", "UNIQ_KEY": r["producerUniqueId"], "WAIT": "true",
               "TAGS": "TagBatch", "seq": str(k)}
        m = Message(r["topic"], r["body"], own, queue_id=r["partition"], flag=r["flag"],
                    born_timestamp=int(r["bornTimestamp"].timestamp() * 1000),
                    store_timestamp=int(r["storeTimestamp"].timestamp() * 1000),
                    born_host=r["bornHost"], store_host=r["storeHost"], batch_properties=batch)
        record, _ = encode_record(m, r["physicalOffset"], r["queueOffset"])
        start = r["segmentPosition"]  # in the file (named after the first record's physical offset)
        assert record == data[start : start + len(record)]
        written += len(record)
    assert written == len(data)  # the two records are the whole file


# --------------------------------------------------------------------------- the spec's vectors


def mocked_123_byte_record() -> bytes:
    """tieredstore MessageFormatUtilTest.buildMockedMessageBuffer, field by field (spec §7)."""
    props = b"UNIQ_KEY\x01uk\x02UserKey\x01UserValue0\x02"
    rec = struct.pack(">iiiiiqqiq", 123, L.MAGIC_V2, 3, 4, 5, 6, 7, 8, 9)
    rec += struct.pack(">q", 10) + struct.pack(">q", 11) + struct.pack(">q", 10)  # born host, store ts, store host
    rec += struct.pack(">iqi", 13, 14, 0) + struct.pack(">h", 0) + struct.pack(">h", len(props)) + props
    return rec


def test_spec_123_byte_v2_record(tmp_path):
    rec = mocked_123_byte_record()
    assert len(rec) == 123
    os.makedirs(tmp_path / "commitlog")
    # PHYSICALOFFSET is 7: the file that holds it at position 0 starts at offset 7.
    (tmp_path / "commitlog" / L.file_name(7)).write_bytes(rec)
    [r] = rows(decode(tmp_path, verifyCrc=False))
    assert (r["bodyCrc"], r["partition"], r["flag"], r["queueOffset"], r["physicalOffset"]) == (3, 4, 5, 6, 7)
    assert (r["sysFlag"], r["transactionState"], r["deliveryCount"], r["preparedTransactionOffset"]) == (8, "COMMIT", 13, 14)
    assert int(r["bornTimestamp"].timestamp() * 1000) == 9 and int(r["storeTimestamp"].timestamp() * 1000) == 11
    assert r["bornHost"] == r["storeHost"] == "0.0.0.0:10"  # the long 10: ip 0.0.0.0, port 10
    assert (r["topic"], r["body"], r["bodySize"], r["uniqueId"]) == ("", b"", 0, "uk")
    assert dict(r["properties"]) == {"UserKey": "UserValue0"}
    assert r["messageId"] == "000000000000000A0000000000000007"
    assert r["transactionId"] == "uk"  # a committed transaction's id is its UNIQ_KEY
    # The stored CRC (3) is not the empty body's (0). As the last record of the file being
    # written it may be half-copied, so it waits; once a record follows, it is quarantined.
    assert decode(tmp_path).table.num_rows == 0
    after, _ = encode_record(Message("t", b"next"), 7 + 123, 0)
    (tmp_path / "commitlog" / L.file_name(7)).write_bytes(rec + after)
    result = decode(tmp_path)
    [q] = result.quarantined.to_pylist()
    assert q["rawBytes"] == rec and "BODYCRC mismatch: stored 3" in q["reason"]
    assert [r["body"] for r in rows(result)] == [b"next"]


@pytest.mark.parametrize(
    ("host", "offset", "msg_id"),
    [("100.81.0.250:10911", 311825178782, "645100FA00002A9F000000489A3AA09E"),
     ("[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911", 3232, "24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0")],
)
def test_spec_message_id_vectors(tmp_path, host, offset, msg_id):
    assert L.offset_message_id(L.host_bytes(host), offset) == msg_id
    assert L.decode_offset_message_id(msg_id) == (host, offset)
    # Through the decoder: a record at that physical offset, stored by that host.
    os.makedirs(tmp_path / "commitlog")
    (tmp_path / "commitlog" / L.file_name(offset)).write_bytes(encode_record(Message("t", b"x", store_host=host), offset, 0)[0])
    [r] = rows(decode(tmp_path))
    assert r["messageId"] == msg_id and r["storeHost"] == host and r["physicalOffset"] == offset


def test_properties_follow_the_brokers_parser_rules():
    assert L.string_to_properties("") == {}
    assert L.string_to_properties("a\x01b") == {"a": "b"}  # no trailing separator needed
    assert L.string_to_properties("a\x01b\x02") == {"a": "b"}
    assert L.string_to_properties("\x01b\x02a\x01\x02") == {}  # empty name, empty value: dropped
    assert L.string_to_properties("k\x01v\x02k\x01w\x02") == {"k": "w"}  # duplicate: last wins
    assert L.string_to_properties("k\x01v\x01x\x02") == {"k": "v\x01x"}  # split at the first 0x01
    assert L.string_to_properties("1\x012\x02") == {"1": "2"}
    assert L.string_to_properties(L.crc32_trailer(99)) == {"__CRC32#": "9900000000"}


# --------------------------------------------------------------------------- round trips


def test_round_trip_of_a_plain_message(tmp_path):
    r = one(tmp_path, Message("orders", b"hello", {"UNIQ_KEY": "AB12", "TAGS": "paid", "KEYS": "k1  k2 ", "app": "shop",
                                                  "TRACE_CONTEXT": "00-abc-01", "CORRELATION_ID": "c9"},
                              queue_id=3, flag=77, born_host="10.0.0.1:5000", store_host="10.0.0.2:10911"))
    assert (r["topic"], r["partition"], r["queueOffset"], r["flag"], r["body"]) == ("orders", 3, 0, 77, b"hello")
    assert (r["uniqueId"], r["tags"], r["keys"], r["traceId"], r["correlationId"]) == (
        "AB12", "paid", ["k1", "k2"], "00-abc-01", "c9")
    assert dict(r["properties"]) == {"app": "shop"} and len(r["headers"]) == 6
    assert (r["bornHost"], r["storeHost"], r["priority"], r["durability"]) == ("10.0.0.1:5000", "10.0.0.2:10911", 5, 0)
    assert (r["messageType"], r["compression"], r["transactionState"], r["systemCopy"]) == ("NORMAL", None, None, False)


def test_v2_magic_for_long_topics_and_ipv6_hosts(tmp_path):
    long_topic = "%RETRY%" + "g" * 200
    w = CommitLogWriter(str(tmp_path), 64 << 10)
    a = w.put(Message(long_topic, b"v2", born_host="[::1]:7", store_host="[fd00::2]:10911"))
    b = w.put(Message("short", b"v1", version=2))  # v2 may be used for any topic
    c = w.put(Message("ipv6-born-only", b"x", born_host="[2001:db8::5]:9"))
    w.close()
    with open(tmp_path / "commitlog" / a.segment, "rb") as f:
        data = f.read(a.length)
    assert struct.unpack_from(">i", data, 4)[0] == L.MAGIC_V2
    out = {r["segmentPosition"]: r for r in rows(decode(tmp_path))}
    assert out[a.position]["topic"] == long_topic and out[a.position]["bornHost"] == "[::1]:7"
    assert out[a.position]["storeHost"] == "[fd00::2]:10911" and len(out[a.position]["messageId"]) == 56
    assert out[a.position]["sysFlag"] & 0x30 == 0x30
    assert out[b.position]["topic"] == "short" and out[b.position]["body"] == b"v1"
    assert out[c.position]["bornHost"] == "[2001:db8::5]:9" and len(out[c.position]["messageId"]) == 32


def test_files_roll_with_a_blank_record_and_offsets_match_names(tmp_path):
    w = CommitLogWriter(str(tmp_path), 4096)
    written = [w.put(Message("t", bytes(300), {"UNIQ_KEY": str(i)}, queue_id=i % 2)) for i in range(40)]
    w.close()
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert names[:3] == ["00000000000000000000", "00000000000000004096", "00000000000000008192"]
    assert all(os.path.getsize(tmp_path / "commitlog" / n) == 4096 for n in names)
    result = decode(tmp_path)
    out = rows(result)
    assert [r["uniqueId"] for r in out] == [str(i) for i in range(40)]
    assert [r["physicalOffset"] for r in out] == [x.physical_offset for x in written]
    assert all(r["physicalOffset"] == int(r["segment"]) + r["segmentPosition"] for r in out)
    assert [r["queueOffset"] for r in out if r["partition"] == 1] == list(range(20))
    sealed = [s for s in result.scan.segments if s.sealed]
    assert len(sealed) == len(names) - 1 and result.padding_bytes == w.padding
    assert result.decoded_bytes == sum(x.length for x in written)


def test_delay_timer_and_type_inference(tmp_path):
    w = CommitLogWriter(str(tmp_path), 64 << 10)
    base = dict(born_timestamp=1_000_000, store_timestamp=1_000_050)
    cases = [
        ({"DELAY": "3"}, "DELAY", 10_000, None),
        ({"DELAY": "99"}, "DELAY", 7_200_000, None),  # above the table: clamped to the last level
        ({"DELAY": "0"}, "DELAY", None, None),  # level 0: no delay, but still a delay-type send
        ({"TIMER_DELAY_SEC": "30"}, "DELAY", 30_000, None),
        ({"TIMER_DELAY_MS": "1500"}, "DELAY", 1500, None),
        ({"TIMER_DELIVER_MS": "1090000"}, "DELAY", None, 1_090_000),
        ({"DELAY": "1", "TIMER_DELIVER_MS": "5"}, "DELAY", 1000, None),  # DELAY wins over the timer
        ({"TRAN_MSG": "true", "DELAY": "2"}, "TRANSACTION", 5000, None),
        ({"__SHARDINGKEY": "g1"}, "FIFO", None, None),
        ({"DELAY": "abc"}, "DELAY", None, None),  # not a number: no delay, kept in headers
        ({}, "NORMAL", None, None),
    ]
    for props, *_ in cases:
        w.put(Message("t", b"b", props, **base))
    w.close()
    out = rows(decode(tmp_path))
    for r, (props, kind, delay, deliver) in zip(out, cases):
        got_deliver = int(r["startDeliverTime"].timestamp() * 1000) if r["startDeliverTime"] else None
        assert (r["messageType"], r["delayTime"], got_deliver) == (kind, delay, deliver), props
        assert dict(r["headers"]) == props
    custom = rows(decode(tmp_path, delayLevels="2s 4s"))
    assert [r["delayTime"] for r in custom[:2]] == [4000, 4000]


def test_system_copies_transactions_retries_and_request_reply(tmp_path):
    w = CommitLogWriter(str(tmp_path), 64 << 10)
    half = w.put(Message("RMQ_SYS_TRANS_HALF_TOPIC", b"t", {"TRAN_MSG": "true", "REAL_TOPIC": "orders", "UNIQ_KEY": "U"}))
    w.put(Message("orders", b"t", {"TRAN_MSG": "true", "UNIQ_KEY": "U"}, transaction=L.TRANSACTION_COMMIT,
                  prepared_offset=half.physical_offset))
    w.put(Message("SCHEDULE_TOPIC_XXXX", b"d", {"DELAY": "1", "REAL_TOPIC": "orders", "REAL_QID": "0"}))
    w.put(Message("rmq_sys_wheel_timer", b"d", {"TIMER_OUT_MS": "5"}))
    w.put(Message("%RETRY%grp", b"r", {"RETRY_TOPIC": "orders", "ORIGIN_MESSAGE_ID": "X", "__transactionId__": "tx1"},
                  reconsume_times=2))
    w.put(Message("orders", b"q", {"TTL": "3000", "MSG_TYPE": "request"}, born_timestamp=2_000_000))
    w.put(Message("orders", b"p", transaction=L.TRANSACTION_PREPARED))
    w.close()
    h, c, s, t, r, q, p = rows(decode(tmp_path))
    assert [x["systemCopy"] for x in (h, c, s, t, r, q, p)] == [True, False, True, True, False, False, False]
    assert (c["transactionState"], c["preparedTransactionOffset"], c["transactionId"]) == ("COMMIT", half.physical_offset, "U")
    assert h["transactionState"] is None and h["messageType"] == "TRANSACTION"
    assert (r["deliveryCount"], r["transactionId"], dict(r["properties"])) == (2, "tx1", {})
    assert int(q["expireTime"].timestamp() * 1000) == 2_003_000
    assert (p["transactionState"], p["queueOffset"]) == ("PREPARED", 0)


@pytest.mark.parametrize("codec", ["zlib", "lz4", "zstd"])
def test_compressed_bodies_kept_or_decompressed(tmp_path, codec):
    plain = b'{"a":"' + b"z" * 5000 + b'"}'
    r = one(tmp_path, Message("t", plain, compression=codec))
    assert r["compression"] == codec and r["body"] != plain and r["bodySize"] == len(r["body"])
    assert (r["sysFlag"] & 0x1, (r["sysFlag"] >> 8) & 7) == (1, L.COMPRESSION_BITS[codec])
    [d] = rows(decode(tmp_path, decompress=True))
    assert d["body"] == plain and d["bodySize"] == len(plain) and d["compression"] is None


def test_legacy_compression_without_type_bits_is_zlib(tmp_path):
    r = one(tmp_path, Message("t", b"x" * 5000, compression="zlib", compression_type_bits=False))
    assert r["compression"] == "zlib" and (r["sysFlag"] >> 8) & 7 == 0
    assert rows(decode(tmp_path, decompress=True))[0]["body"] == b"x" * 5000


def test_a_body_that_does_not_decompress_is_quarantined_only_when_asked(tmp_path):
    with CommitLogWriter(str(tmp_path), 64 << 10) as w:
        rec, _ = encode_record(Message("t", b"not zlib at all", compression=None), 0, 0)
        rec = bytearray(rec)
        rec[36:40] = struct.pack(">i", 0x301)  # says zlib-compressed
        w.put_raw(bytes(rec))
    assert len(rows(decode(tmp_path))) == 1
    [q] = decode(tmp_path, decompress=True).quarantined.to_pylist()
    assert "does not decompress as zlib" in q["reason"] and q["rawBytes"] == bytes(rec)


def test_inner_batch_splits_into_its_messages(tmp_path):
    inner = [Inner(b"one", {"UNIQ_KEY": "I1", "TAGS": "a"}, flag=1), Inner(b"", {"UNIQ_KEY": "I2"}),
             Inner(b"three", {}, flag=3)]
    w = CommitLogWriter(str(tmp_path), 64 << 10)
    w.put(Message("batched", b"first plain"))
    b = w.put(Message("batched", properties={"UNIQ_KEY": "OUTER"}, inner=inner))
    w.put(Message("batched", b"after"))
    w.close()
    result = decode(tmp_path)
    out = rows(result)
    assert [r["body"] for r in out] == [b"first plain", b"one", b"", b"three", b"after"]
    assert [r["queueOffset"] for r in out] == [0, 1, 2, 3, 4]  # the batch takes one offset per message
    assert [r["uniqueId"] for r in out[1:4]] == ["I1", "I2", None]
    assert [r["flag"] for r in out[1:4]] == [1, 0, 3] and out[1]["tags"] == "a"
    assert len({r["segmentPosition"] for r in out}) == 5 and out[1]["segmentPosition"] == b.body_position
    assert {r["messageId"] for r in out[1:4]} == {b.message_id} and out[1]["sysFlag"] & 0xC0 == 0xC0
    assert result.decoded_bytes == w.pos  # every byte of the batch record is accounted for


def test_crc32_trailer_is_dropped(tmp_path):
    r = one(tmp_path, Message("t", b"x", {"k": "v"}, crc32_trailer=True))
    assert dict(r["headers"]) == {"k": "v"}


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("rocketmq")
    truth = generate(str(root), 4000, file_size=128 << 10)
    return root, truth, decode(root)


def test_sample_store_decodes_to_its_ground_truth(sample):
    root, truth, result = sample
    got = {(r["topic"], r["partition"], r["segment"], r["segmentPosition"]): r for r in rows(result)}
    # Records only a quality rule quarantines (at ingest) decode like any other.
    held = {(h.segment, h.position) for h in truth.held}
    assert held and held <= {(k[2], k[3]) for k in got}
    got = {k: r for k, r in got.items() if (k[2], k[3]) not in held}
    want = truth.by_key()
    assert set(got) == set(want)
    for key, m in want.items():
        r = got[key]
        assert (r["body"], r["queueOffset"], r["messageId"], r["uniqueId"], r["producerUniqueId"], r["tags"],
                r["traceId"]) == (m.body, m.virtual_offset, m.message_id, m.unique_id, m.producer_unique_id, m.tags,
                                  m.trace_id), key
    # The batch send: every member reports the batch's UNIQ_KEY (as RocketMQ's decoder does), each its own too.
    members = [m for m in want.values() if m.unique_id != m.producer_unique_id]
    assert len(members) == 4 and len({m.unique_id for m in members}) == 1
    assert len({m.producer_unique_id for m in members}) == 4
    kinds = {r["messageType"] for r in got.values()}
    assert kinds == {"NORMAL", "DELAY", "TRANSACTION", "FIFO"}
    assert {r["compression"] for r in got.values()} >= {None, "zlib", "lz4", "zstd"}
    assert any(r["systemCopy"] for r in got.values()) and any(r["storeHost"] for r in got.values())


def test_every_corruption_is_quarantined_alone_with_its_bytes(sample):
    root, truth, result = sample
    got = {(q["segment"], q["segmentPosition"]): q for q in result.quarantined.to_pylist()}
    assert len(got) == len(truth.quarantined) == 10
    for e in truth.quarantined:
        q = got[(e.segment, e.position)]
        assert q["recordLength"] == e.length == len(q["rawBytes"]) and e.reason in q["reason"], (e, q["reason"])
    # Every byte of every file is a message, a quarantined record or the blank end of a file.
    on_disk = sum(s.file_size for s in result.scan.segments)
    assert result.decoded_bytes + result.quarantined_bytes + result.padding_bytes == on_disk
    assert result.padding_bytes == truth.padding_bytes
    notes = " ".join(result.scan.notes)
    assert "shorter than its peers" in notes and "are missing" in notes


def test_framing_walk_stops_on_each_kind_of_break():
    rec, _ = encode_record(Message("t", b"x"), 0, 0)
    assert walk(rec + bytes(16), 0, len(rec) + 16, len(rec) + 16, 0).kind == "zero"
    assert walk(rec + struct.pack(">ii", 8, L.MAGIC_BLANK), 0, len(rec) + 8, len(rec) + 8, 0).kind == "blank"
    fr = walk(rec + b"\x00\x00\x00\x70garbage!", 0, len(rec) + 12, len(rec) + 12, 0)
    assert (fr.kind, fr.stop) == ("broken", len(rec)) and "bad magic" in fr.why
    fr = walk(rec, 0, 50, len(rec), 0)
    assert (fr.kind, fr.need) == ("incomplete", len(rec))


def test_a_name_that_is_not_20_digits_or_not_a_commitlog(tmp_path):
    with CommitLogWriter(str(tmp_path), 4096) as w:
        w.put(Message("t", b"ok"))
    folder = tmp_path / "commitlog"
    rec, _ = encode_record(Message("t", b"stray"), 0, 0)
    (folder / "123").write_bytes(rec)
    (folder / "notes.txt").write_bytes(b"hello")
    (folder / ".hidden").write_bytes(b"x")
    result = decode(tmp_path)
    [q] = result.quarantined.to_pylist()
    assert (q["segment"], q["rawBytes"]) == ("123", rec) and "not a 20-digit" in q["reason"]
    assert "commitlog/notes.txt" in result.scan.ignored and len(rows(result)) == 1


def test_empty_folder_and_missing_folder(tmp_path):
    assert decode(tmp_path).table.num_rows == 0
    with pytest.raises(FileNotFoundError, match="not a directory"):
        decode(tmp_path / "nope")


# --------------------------------------------------------------------------- the file being written


def test_live_file_scan_stops_at_the_zero_tail_and_follows_appends(tmp_path):
    codec = RocketMqCommitLogCodec()
    w = CommitLogWriter(str(tmp_path), 64 << 10)
    a = w.put(Message("t", b"first"))
    [seg] = codec.scan(str(tmp_path)).segments
    assert (seg.committed_end, seg.sealed, seg.file_size) == (a.length, False, a.length)
    # Records the broker is still copying in wait: one whose tail is not there yet (lengths
    # do not add up), one whose lengths add up but whose last bytes are still zeros, and
    # one whose body is not all there (CRC).
    rec = w.record_bytes(Message("t", b"second body", {"k": "v"}))
    fd = os.open(tmp_path / "commitlog" / seg.segment, os.O_RDWR)
    for partial, counted in ((rec[:40], 0), (rec[:-3] + bytes(3), len(rec)),
                             (rec[:90] + bytes(5) + rec[95:], len(rec))):
        os.pwrite(fd, partial, w.pos)
        [seg] = codec.scan(str(tmp_path)).segments
        assert (seg.committed_end, seg.file_size) == (a.length, a.length + counted)
    os.close(fd)
    b = w.put(Message("t", b"second body", {"k": "v"}))
    [seg] = codec.scan(str(tmp_path)).segments
    assert seg.committed_end == b.position + b.length
    out = rows(decode_root(codec, str(tmp_path)))
    assert [r["body"] for r in out] == [b"first", b"second body"]
    # Rolling seals the file: then its blank end is read too.
    w._roll()
    w.put(Message("t", b"third"))
    w.close()
    segs = codec.scan(str(tmp_path)).segments
    assert [(s.sealed, s.committed_end == s.file_size) for s in segs] == [(True, True), (False, True)]


def test_split_points_and_advance_stop_on_record_boundaries(sample):
    root, truth, _ = sample
    codec = RocketMqCommitLogCodec()
    seg = next(s for s in codec.scan(str(root)).segments if s.sealed and not s.whole_file)
    with open(os.path.join(root, seg.path), "rb") as f:
        data = f.read()
    fr = walk(data, 0, len(data), len(data), seg.start_virtual)
    boundaries = set((fr.positions + fr.lengths).tolist())
    cuts = codec.split_points(str(root), seg, 0, seg.committed_end, 10_000)
    assert len(cuts) >= 5 and set(cuts) <= boundaries
    # Each cut is the first boundary at least the target past the one before, whatever the chunks.
    want, mark = [], 0
    for pos in sorted(boundaries):
        if pos - mark >= 10_000 and pos < seg.committed_end:
            want.append(pos)
            mark = pos
    assert cuts == want
    small = RocketMqCommitLogCodec(chunk_bytes=1024)  # some records are larger than a chunk
    assert max(fr.lengths) > 1024 and small.split_points(str(root), seg, 0, seg.committed_end, 10_000) == want
    every = sorted(b for b in boundaries if b < seg.committed_end)
    assert codec.split_points(str(root), seg, 0, seg.committed_end, 0) == every  # a cut at every record
    stop, n = codec.advance(str(root), seg, 0, seg.committed_end, 5_000, None)
    assert stop in boundaries and stop <= 5_000 + max(fr.lengths) and n >= 1
    stop, n = codec.advance(str(root), seg, 0, seg.committed_end, None, 3)
    assert n == 3 and stop == int(fr.positions[3])
    stop, n = codec.advance(str(root), seg, 0, seg.committed_end, 1, None)  # one record even over budget
    assert n == 1 and stop == int(fr.lengths[0])


def test_decode_in_small_chunks_gives_the_same_rows(sample):
    root, _, whole = sample
    chunked = decode_root(RocketMqCommitLogCodec(chunk_bytes=20_000), str(root))
    cols = ["segment", "segmentPosition", "reason", "recordLength", "messageId", "body"]
    order = [("segment", "ascending"), ("segmentPosition", "ascending")]
    assert chunked.table.select(cols).sort_by(order).equals(whole.table.select(cols).sort_by(order))


def test_crc_of_the_broker_matches_ours():
    body = b"Once, there was a chance for me!"
    assert zlib.crc32(body) & 0x7FFFFFFF == 151131488


def test_uniq_key_layout_round_trip():
    key = L.make_uniq_key(bytes([10, 1, 0, 7]), 4242, 0x5EED1234, 123_456, 7)
    raw = bytes.fromhex(key)
    assert len(key) == 32 and raw[:4] == bytes([10, 1, 0, 7])
    assert struct.unpack(">H", raw[4:6])[0] == 4242 and struct.unpack(">I", raw[10:14])[0] == 123_456


def test_out_of_range_timestamps_are_quarantined(tmp_path):
    with CommitLogWriter(str(tmp_path), 64 << 10) as w:
        w.put(Message("t", b"a", born_timestamp=2**62))
        w.put(Message("t", b"b"))
    result = decode(tmp_path)
    assert [r["body"] for r in rows(result)] == [b"b"]
    assert "BORNTIMESTAMP" in result.quarantined.to_pylist()[0]["reason"]
    assert pa.compute.sum(result.table["recordLength"]).as_py() == w.pos


def _store_of(tmp_path, n=12, file_size=64 << 10):
    w = CommitLogWriter(str(tmp_path), file_size)
    written = [w.put(Message("t", b"body-%d" % i + bytes(100), {"UNIQ_KEY": f"U{i}"})) for i in range(n)]
    w.close()
    return w, written, tmp_path / "commitlog" / written[0].segment


def _patch(path, at, data):
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, data, at)
    os.close(fd)


def test_a_blank_magic_inside_a_file_is_corruption_not_its_end(tmp_path):
    w, written, path = _store_of(tmp_path)
    _patch(path, written[2].position + 4, struct.pack(">i", L.MAGIC_BLANK))
    result = decode(tmp_path)
    assert [r["uniqueId"] for r in rows(result)] == [f"U{i}" for i in range(12) if i != 2]
    [q] = result.quarantined.to_pylist()
    assert q["segmentPosition"] == written[2].position and "does not end the file" in q["reason"]


def test_an_inflated_totalsize_does_not_swallow_the_records_after_it(tmp_path):
    w, written, path = _store_of(tmp_path)
    _patch(path, written[3].position, struct.pack(">i", written[3].length * 4))
    result = decode(tmp_path)
    assert [r["uniqueId"] for r in rows(result)] == [f"U{i}" for i in range(12) if i != 3]
    [q] = result.quarantined.to_pylist()
    assert (q["segmentPosition"], q["recordLength"]) == (written[3].position, written[3].length)


def test_zeros_inside_the_live_file_hide_no_record(tmp_path):
    w, written, path = _store_of(tmp_path)
    _patch(path, written[4].position, bytes(written[4].length + written[5].length))
    result = decode(tmp_path)
    assert len(rows(result)) == 10
    [q] = result.quarantined.to_pylist()
    assert q["segmentPosition"] == written[4].position and q["rawBytes"] == bytes(q["recordLength"])


def test_a_file_that_shrinks_while_read_ends_the_read_with_a_loss_row(tmp_path):
    w, written, path = _store_of(tmp_path, n=40)
    codec = RocketMqCommitLogCodec(chunk_bytes=1000)
    [seg] = codec.scan(str(tmp_path)).segments
    assert codec.advance(str(tmp_path), seg, 0, seg.committed_end, 2000, None)[1] >= 1
    results = codec.decode(str(tmp_path), seg, 0, seg.committed_end)
    first = next(results)
    os.truncate(path, 3000)
    rest = list(results)  # no hang
    loss = rest[-1].batch.to_pylist()[-1]
    assert "shrank" in loss["reason"] and loss["segmentPosition"] + loss["recordLength"] == seg.committed_end
    assert all(c <= 3000 for c in codec.split_points(str(tmp_path), seg, 0, seg.committed_end, 500))
    total = first.decoded_bytes + sum(r.decoded_bytes + r.quarantined_bytes for r in rest)
    assert total == seg.committed_end


def test_a_store_of_empty_files(tmp_path):
    os.makedirs(tmp_path / "commitlog")
    (tmp_path / "commitlog" / L.file_name(0)).write_bytes(b"")
    result = decode(tmp_path)
    assert result.table.num_rows == 0 and [s.committed_end for s in result.scan.segments] == [0]


def test_the_vectorised_framing_check_agrees_with_the_scalar_one():
    import random

    from msglake.formats.rocketmq_commitlog import _first_misframed, check_record

    rng = random.Random(3)
    good, _ = encode_record(Message("topic-x", b"some body", {"k": "v", "UNIQ_KEY": "U"},
                                    born_host="[::1]:5", version=2), 0, 0)
    for trial in range(400):
        rec = bytearray(good)
        for _ in range(rng.randint(1, 3)):  # flip bytes past TOTALSIZE/magic (the chain checks those)
            rec[rng.randrange(8, len(rec))] = rng.randrange(256)
        buf = bytes(rec)
        scalar = check_record(buf, 0, len(buf), 0)
        vector = _first_misframed(buf, np.array([0]), np.array([len(buf)]), 0)
        assert (scalar is None) == (vector is None), (trial, scalar)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_property_piece_without_a_separator_is_dropped_and_the_record_kept(tmp_path, native):
    # The broker's string2messageProperties skips such a piece (spec §3.1); so does the decoder.
    props = b"a\x011\x02oops\x02TAGS\x01t\x02"
    with CommitLogWriter(str(tmp_path), 64 << 10) as w:
        raw = bytearray(w.record_bytes(Message("t", b"x")))
        raw = raw[:-2] + struct.pack(">h", len(props)) + props  # the record had no properties
        raw[0:4] = struct.pack(">i", len(raw))
        w.put_raw(bytes(raw))
    result = decode_root(RocketMqCommitLogCodec(native=native), str(tmp_path))
    assert result.quarantined.num_rows == 0
    [r] = rows(result)
    assert (r["properties"], r["tags"], r["body"]) == ([("a", "1")], "t", b"x")
