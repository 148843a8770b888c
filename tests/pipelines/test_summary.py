from msglake.pipelines.io.checkpoint import bytes_moved
from msglake.pipelines.jobs.ingest import IngestSummary


def summary(**kw):
    base = dict(source="s", batches=2, messages=10, message_bytes=900, quarantined=1, quarantined_bytes=100,
                seconds=2.0, read_bytes=1000, read_total=5000, on_disk=5050, pending=50)
    base.update(kw)
    return IngestSummary(**base)


def test_balanced_run_says_so():
    text = "\n".join(summary().lines())
    assert "every byte of this run is accounted for" in text and "on disk 5,050 bytes = read 5,000 + pending 50" in text


def test_unbalanced_run_warns():
    s = summary(read_bytes=1200)
    assert not s.balanced and "WARNING" in "\n".join(s.lines())


def test_segments_deleted_before_read_are_named():
    text = "\n".join(summary(deleted_unread={"t/t-0.diskqueue.000001.dat": [10, 90], "t/x.dat": [5, None]}).lines())
    assert "LOST: t/t-0.diskqueue.000001.dat was deleted before it was read: bytes 10..90" in text
    assert "bytes from 5 on (size unknown)" in text


def test_bytes_moved_counts_advances_and_lost_ranges():
    start = {"version": 1, "segments": {"a": 100, "b": 40}}
    end = {"version": 1, "segments": {"a": 150, "c": 30}, "deleted": {"b": [40, 70], "d": [0, None]}}
    assert bytes_moved(start, end) == 50 + 30 + 30
    assert bytes_moved(None, {"version": 1, "segments": {"a": 7}}) == 7


def test_files_not_read_are_listed_with_their_bytes_apart_from_on_disk():
    ignored = {f"t/nest/f{i}.dat": "in a folder nested in a topic folder (nsqd writes none)" for i in range(7)}
    text = "\n".join(summary(ignored=ignored, ignored_bytes=7938).lines())
    assert "on disk 5,050 bytes" in text  # unchanged: the ignored bytes are no segment bytes
    assert "not read: 7 file(s), 7,938 bytes under the source root that are no segments (not counted in on disk)" in text
    assert "t/nest/f0.dat (in a folder nested" in text and "... 2 more" in text
