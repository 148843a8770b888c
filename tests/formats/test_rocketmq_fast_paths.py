"""RocketMQ decoder shortcuts (hole skipping, batched CRC checks) give what the plain reads give."""
from __future__ import annotations

import os

from msglake.formats.base import decode_root
from msglake.formats.rocketmq_commitlog import RocketMqCommitLogCodec, _all_zero, _skip_hole, resync
from msglake.samples.rocketmq_writer import CommitLogWriter, Message

FILE_SIZE = 4 << 20


def _store(root, hole: tuple[int, int] | None, dense_tail: bool = False) -> str:
    """A store whose records ``hole`` (a range of record indices) were never written.

    Without ``dense_tail`` those bytes and the unwritten end are holes of a sparse file;
    with it, they are written as explicit zeros (the same bytes, read the slow way).
    """
    src = str(root / "src")
    with CommitLogWriter(src, FILE_SIZE) as w:
        placed = [w.put(Message("orders", b"%05d" % i * 2000, {"KEYS": f"k{i}"})) for i in range(120)]
    name = "00000000000000000000"
    data = open(os.path.join(src, "commitlog", name), "rb").read()
    out = root / ("dense" if dense_tail else "sparse")
    os.makedirs(out / "commitlog")
    skip_from = placed[hole[0]].position if hole else None
    skip_to = placed[hole[1]].position if hole else None
    end = placed[-1].position + placed[-1].length
    with open(out / "commitlog" / name, "wb") as f:
        f.truncate(FILE_SIZE)
        if hole is None:
            f.write(data[:end])
        else:
            f.write(data[:skip_from])
            if dense_tail:
                f.write(bytes(skip_to - skip_from))
            f.seek(skip_to)
            f.write(data[skip_to:end])
        if dense_tail:
            f.write(bytes(FILE_SIZE - end))
    return str(out)


def test_a_hole_between_records_decodes_like_written_zeros(tmp_path):
    sparse = decode_root(RocketMqCommitLogCodec(), _store(tmp_path, (40, 90)))
    dense = decode_root(RocketMqCommitLogCodec(), _store(tmp_path, (40, 90), dense_tail=True))
    assert sparse.table.equals(dense.table)
    assert (sparse.decoded_bytes, sparse.quarantined_bytes) == (dense.decoded_bytes, dense.quarantined_bytes)
    assert sparse.messages.num_rows == 70 and sparse.quarantined.num_rows == 1


def test_hole_skipping_never_passes_a_record(tmp_path):
    root = _store(tmp_path, (40, 90))
    path = os.path.join(root, "commitlog", "00000000000000000000")
    with CommitLogWriter(str(tmp_path / "ref"), FILE_SIZE) as w:
        placed = [w.put(Message("orders", b"%05d" % i * 2000, {"KEYS": f"k{i}"})) for i in range(120)]
    fd = os.open(path, os.O_RDONLY)
    try:
        gap_from, gap_to = placed[40].position, placed[90].position
        assert gap_from <= _skip_hole(fd, gap_from, FILE_SIZE) <= gap_to
        assert resync(fd, gap_from + 1, FILE_SIZE, 0, FILE_SIZE) == gap_to
        end = placed[-1].position + placed[-1].length
        assert _skip_hole(fd, end, FILE_SIZE) in (end, FILE_SIZE)  # FILE_SIZE where holes are seen
        assert _all_zero(fd, end, FILE_SIZE) and _all_zero(fd, gap_from, gap_to)
        assert not _all_zero(fd, gap_from, gap_to + 8)  # the next record's TOTALSIZE and magic
    finally:
        os.close(fd)


def test_body_crc_mismatches_are_found_among_many_records(tmp_path):
    root = _store(tmp_path, None)
    path = os.path.join(root, "commitlog", "00000000000000000000")
    with CommitLogWriter(str(tmp_path / "ref"), FILE_SIZE) as w:
        placed = [w.put(Message("orders", b"%05d" % i * 2000, {"KEYS": f"k{i}"})) for i in range(120)]
    with open(path, "r+b") as f:
        for i in (3, 77):
            f.seek(placed[i].position + 8)  # BODYCRC
            f.write(b"\x00\x00\x00\x07")
    result = decode_root(RocketMqCommitLogCodec(), root)
    assert result.messages.num_rows == 118
    reasons = [(q["segmentPosition"], q["reason"]) for q in result.quarantined.to_pylist()]
    assert [p for p, _ in reasons] == [placed[3].position, placed[77].position]
    assert all(r.startswith("BODYCRC mismatch: stored 7, the body's CRC32 is ") for _, r in reasons)
    assert decode_root(RocketMqCommitLogCodec(verifyCrc=False), root).messages.num_rows == 120


def test_gather_slices_takes_the_same_bytes_whatever_the_path():
    import numpy as np

    from msglake.formats.base import gather_slices

    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 1 << 16).astype(np.uint8)
    for width in (3, 40, 300):  # short slices (index), longer ones (mask), most of the buffer (mask)
        starts = np.sort(rng.choice(np.arange(0, len(buf) - 400, 400), 100, replace=False))
        ends = starts + rng.integers(0, width, len(starts))
        offsets, data = gather_slices(buf, starts, ends)
        assert data.tobytes() == b"".join(buf[a:b].tobytes() for a, b in zip(starts, ends))
        assert offsets.tolist() == np.concatenate(([0], np.cumsum(ends - starts))).tolist()


def test_property_columns_are_taken_once_and_match_the_entries():
    import pyarrow as pa

    from msglake.formats.rocketmq_properties import parse

    texts = pa.array(["TAGS\x01a\x02KEYS\x01k1 k2\x02TAGS\x01b", None, "KEYS\x01z", "x\x01\x02\x01y"])
    p = parse(texts)
    assert p.get("TAGS").to_pylist() == ["b", None, None, None]
    assert p.get("KEYS").to_pylist() == ["k1 k2", None, "z", None]
    assert p.get("x").to_pylist() == [None] * 4 and p.get("nope").to_pylist() == [None] * 4
    assert p.get("TAGS") is p.get("TAGS")


def test_big_endian_reads_are_the_same_in_bounds_and_at_the_edges():
    import numpy as np

    from msglake.formats.base import be_int, be_uint

    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 4096).astype(np.uint8)
    for width in (1, 2, 4, 8):
        inside = rng.integers(0, len(buf) - width + 1, 500)
        edge = np.array([0, len(buf) - width, len(buf) - width + 1, len(buf) - 1])  # the last two run out
        for at in (inside, edge):
            idx = np.clip(at[:, None] + np.arange(width), 0, len(buf) - 1)
            raw = np.ascontiguousarray(buf[idx])
            assert be_int(buf, at, width).tolist() == raw.view(f">i{width}").reshape(-1).astype(np.int64).tolist()
            assert be_uint(buf, at, width).tolist() == raw.view(f">u{width}").reshape(-1).tolist()
