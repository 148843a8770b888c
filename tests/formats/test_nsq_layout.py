import pytest

from msglake.formats import nsq_layout as L


@pytest.mark.parametrize(
    ("num", "name"),
    [(0, "orders-0.diskqueue.000000.dat"), (999990, "orders-0.diskqueue.999990.dat"),
     (999991, "orders-0.diskqueue.000999991.dat")],
)
def test_segment_file_name_switches_to_nine_digits_past_file_num_v2_seq(num, name):
    assert L.segment_file_name("orders", 0, num) == name
    m = L.SEGMENT_RE.match(name)
    assert (m["topic"], int(m["partition"]), int(m["num"])) == ("orders", 0, num)


def test_partition_is_the_last_dash_number_of_the_queue_name():
    m = L.SEGMENT_RE.match("my-topic-2-7.diskqueue.000003.dat")
    assert (m["topic"], m["partition"]) == ("my-topic-2", "7")


def test_the_old_wrong_pattern_does_not_parse():
    assert L.SEGMENT_RE.match("orders.diskqueue.0.000000.dat") is None


@pytest.mark.parametrize(
    "name",
    ["orders-0.diskqueue.meta.writer.dat", "orders-0.diskqueue.meta.writer.dat.tmp",
     "orders-0.diskqueue.meta.extra.dat", "orders-0.diskqueue.000001.dat.offsetmeta.dat",
     "orders-0:ch.diskqueue.meta.v2.reader.dat", "orders-0.diskqueue.000004.dat.rolldata",
     "orders-0-[delayed.queue].diskqueue.000000.dat", "orders-0-[delayed.queue].db",
     "orders_0.commit.log", "magic0", "channel_meta0", "orders-0.stat.history.dat"],
)
def test_files_beside_segments_are_classified_as_not_segments(name):
    assert L.classify(name) is not None


def test_segment_is_not_classified_away():
    assert L.classify("orders-0.diskqueue.000000.dat") is None


def test_writer_meta_with_and_without_magic():
    meta = L.WriterMeta(10, 1, 14, 140)
    raw = L.format_writer_meta(meta)
    assert raw.endswith(L.META_MAGIC)
    assert L.parse_writer_meta(raw) == meta
    assert L.parse_writer_meta(raw[:-2]) == meta


@pytest.mark.parametrize("raw", [b"", b"10\n", b"10\n1,2\n", b"x\n1,2,3\n", b"1\n-1,2,3\n"])
def test_malformed_writer_meta_is_rejected(raw):
    with pytest.raises(ValueError):
        L.parse_writer_meta(raw)


def test_offset_meta_round_trip_and_rejects_backwards_range():
    meta = L.OffsetMeta(9, 0, 126)
    assert L.parse_offset_meta(L.format_offset_meta(meta)) == meta
    with pytest.raises(ValueError):
        L.parse_offset_meta(b"9\n126,0\n")


def test_extra_meta_gives_queue_start():
    raw = b'{"SegOffset":{"FileNum":3,"Pos":100},"VirtualOffset":5000,"TotalMsgCnt":40}'
    assert L.parse_extra_meta(raw) == (3, 100, 5000)
