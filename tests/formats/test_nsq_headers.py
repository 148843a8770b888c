"""NSQ JSON headers parsed a chunk at a time: the same verdicts and columns as record by record."""
from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from msglake.formats.base import decode_root
from msglake.formats.nsq_ext import NsqExtCodec
from msglake.formats.nsq_headers import HeaderError, as_text, header_columns, load_header, load_headers, scan_headers
from msglake.formats.nsq_headers import _load_each as one_by_one  # load_header on each header: the reference
from msglake.samples.nsq_writer import NsqQueueWriter

TS = 1_793_500_000_123_456_789


GOOD = [b'{"a":"b"}', b'{"##trace_id":"12","priority":3}', b"{}", b' {"x":[1,{"y":null}]} ']


@pytest.mark.parametrize(
    "raws",
    [
        GOOD,  # the one-call path
        GOOD + [b'{"##trace_id":"-1"}', b'{"##trace_id":"18446744073709551616"}', b'{"##trace_id":""}',
                b'{"##trace_id":"18446744073709551615"}', b'{"##trace_id":"0018446744073709551615"}',
                b'{"##trace_id":"\xd9\xa1"}', b'{"##trace_id":null}'],  # trace ids checked with Arrow kernels
        GOOD + [b'{"##trace_id":12}'],  # a trace id that is not a string: one by one
        GOOD + [b"not json"] + GOOD,  # invalid JSON: one by one
        GOOD + [b"[1]", b'"s"', b"null"],  # JSON, but not objects
        # Headers that are invalid alone but would make valid JSON if joined with commas.
        [b'{"x":"', b'"}', b'{"a":1},{"b":2}'],
        [b'{"a":[{}', b'{}]}', b"{},{}"],
        [],
    ],
)
def test_load_headers_gives_the_verdicts_of_load_header(raws):
    assert load_headers(raws) == one_by_one(raws)


def test_duplicate_keys_keep_the_last_value_once():
    [doc], _, _ = load_headers([b'{"priority":1,"app":"x","priority":"7"}'])
    cols = header_columns([doc])
    assert cols["priority"].to_pylist() == [7]
    assert cols["headers"].to_pylist() == [[("priority", "7"), ("app", "x")]]


def test_header_map_values_that_are_not_strings_are_compact_json():
    values = [5, -(1 << 63), (1 << 63) + 1, (1 << 64) + 5, 2.5, 5.0, True, False, None, [1, "a", None], {"k": [True]},
              "plain", ""]
    docs = [{f"k{i}": v for i, v in enumerate(values)}, {"only": 1}, {}]
    cols = header_columns(docs)
    expected = [[(f"k{i}", as_text(v)) for i, v in enumerate(values)], [("only", "1")], []]
    assert cols["headers"].to_pylist() == expected
    assert cols["properties"].to_pylist() == expected
    assert as_text((1 << 64) + 5) == json.dumps((1 << 64) + 5) and as_text(2.5) == orjson.dumps(2.5).decode()


def test_columns_keep_their_exact_rules_for_odd_types():
    docs = [{"bornHost": 5, "keys": "a  b ", "traceId": None, "##trace_id": "9"},
            {"bornHost": None, "keys": ["x", 2], "delayTime": " 12 ", "durability": 1.0},
            {"bornHost": [1], "keys": 3, "delayTime": 1e300, "priority": False, "messageKey": {"a": 1}},
            {"shardingKey": "s", "expireTime": -1, "startDeliverTime": "1793500000000"}]
    cols = header_columns(docs)
    assert cols["bornHost"].to_pylist() == ["5", None, "[1]", None]
    assert cols["keys"].to_pylist() == [["a", "b"], ["x", "2"], None, None]
    assert cols["traceId"].to_pylist() == ["9", None, None, None]
    assert cols["delayTime"].to_pylist() == [None, 12, None, None]
    assert cols["durability"].to_pylist() == [None, 1, None, None]
    assert cols["priority"].to_pylist() == [None, None, None, None]
    assert cols["messageKey"].to_pylist() == [None, None, '{"a":1}', "s"]
    assert cols["expireTime"].null_count == 4 and cols["startDeliverTime"].null_count == 3


def test_columns_spread_over_rows_without_headers():
    docs = [{"priority": 3, "app": "x"}, {"##trace_id": "7", "nsq.client.compress": "2"}]
    cols = header_columns(docs, np.array([1, 3]), 5)
    assert cols["priority"].to_pylist() == [None, 3, None, None, None]
    assert cols["traceId"].to_pylist() == [None, None, None, "7", None]
    assert cols["compression"].to_pylist() == [None, None, None, "snappy", None]
    assert cols["headers"].to_pylist() == [[], [("priority", "3"), ("app", "x")], [],
                                           [("##trace_id", "7"), ("nsq.client.compress", "2")], []]
    assert cols["properties"].to_pylist() == [[], [("app", "x")], [], [], []]


def test_a_bad_header_in_a_chunk_quarantines_only_its_record(tmp_path):
    bad = b'{"a":1'
    with NsqQueueWriter(str(tmp_path), "t", 0) as w:
        for i in range(5):
            w.put(b"b%d" % i, header={"app": "x", "priority": i}, timestamp_ns=TS)
        w.put(b"bad", header=bad, timestamp_ns=TS)
        w.put(b"tag", tag="t1", timestamp_ns=TS)
        w.put_raw(w.frame(b"badtag", tag="x", timestamp_ns=TS).replace(b"\x00\x01x", b"\x00\x01\xff"))
        w.put(b"last", header={"##trace_id": "x"}, timestamp_ns=TS)
    result = decode_root(NsqExtCodec(), str(tmp_path))
    assert [r["body"] for r in result.messages.to_pylist()] == [b"b0", b"b1", b"b2", b"b3", b"b4", b"tag"]
    assert [r["priority"] for r in result.messages.to_pylist()] == [0, 1, 2, 3, 4, 5]
    assert result.messages.column("tags").to_pylist()[-1] == "t1"
    with pytest.raises(HeaderError) as e:
        load_header(bad)
    assert [q["reason"] for q in result.quarantined.to_pylist()] == [
        str(e.value), "version-2 tag is not UTF-8", "##trace_id must be a decimal uint64 string, got 'x'"]


# --------------------------------------------------------------------------- the NumPy reader


def scanned(raws):
    """scan_headers on headers laid end to end, as dicts (None when it leaves them to orjson)."""
    lengths = np.array([len(r) for r in raws], np.int64)
    ends = np.cumsum(lengths) + 3
    got = scan_headers(np.frombuffer(b"xyz" + b"".join(raws) + b"\x00", np.uint8), ends - lengths, ends)
    if got is None:
        return None
    pairs, where, bad = got
    values, docs, i = pairs.values(), [], 0
    for c in pairs.counts.tolist():
        docs.append(dict(zip([pairs.names[x] for x in pairs.code[i : i + c]], values[i : i + c])))
        i += c
    return docs, where, bad


SIMPLE = [b'{"a":"b","c":12}', b"{}", b'{"x":-5,"y":"q r","z":0,"w":123456789012345678}', b'{"":""}',
          b'{"k":"v:,{}[]"}', b'{"##trace_id":"18446744073709551615"}']


def test_simple_headers_read_with_numpy_give_what_orjson_gives():
    assert scanned(SIMPLE) == one_by_one(SIMPLE)
    with_bad_traces = SIMPLE + [b'{"##trace_id":"18446744073709551616"}', b'{"##trace_id":"x1"}', b'{"##trace_id":""}']
    assert scanned(with_bad_traces) == one_by_one(with_bad_traces)


@pytest.mark.parametrize(
    "odd",
    [b'{"a":1,}', b'{"a" :1}', b'{ "a":1}', b'{"a":01}', b'{"a":-0}', b'{"a":1.5}', b'{"a":1e3}', b'{"a":true}',
     b'{"a":null}', b'{"a":"\\n"}', b'{"a":"\\u00e9"}', b'{"a":1,"a":2}', b'{"a":"b"', b'{"a":-}', b'{"a":1-2}',
     b'{"a":"b":"c"}', b'{"a","b":1}', b'{,"a":1}', b'{"a":}', b'{"a"::1}', b'{"a":1}{"b":2}', b'{"a":[1]}',
     b'{"a":{}}', '{"é":1}'.encode(), b'{"a":"\x01"}', b'{"a":1234567890123456789}', b'"s"', b"[]", b"{",
     b'{"a":"1"2}', b'{"x":"', b'"}', b'{"a":1},{"b":2}', b'{"##trace_id":7}'],
)
def test_anything_else_is_left_to_orjson(odd):
    assert scanned(SIMPLE + [odd]) is None


def test_columns_from_the_numpy_reader_equal_the_orjson_ones():
    raws = [b'{"bornTimestamp":1793500000191,"keys":"a  b","priority":"7","app":"x","nsq.client.compress":"2"}',
            b'{"delayTime":123456789012345678,"durability":-3,"priority":99999999999,"traceId":"t"}', b"{}"]
    lengths = np.array([len(r) for r in raws], np.int64)
    pairs, _, _ = scan_headers(np.frombuffer(b"".join(raws), np.uint8), np.cumsum(lengths) - lengths, np.cumsum(lengths))
    docs, _, _ = load_headers(raws)
    a, b = header_columns(pairs, np.array([0, 2, 3]), 4), header_columns(docs, np.array([0, 2, 3]), 4)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equals(b[name]), name
