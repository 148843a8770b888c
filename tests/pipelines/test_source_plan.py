"""How the source plans and feeds its tasks: small segments packed by bytes, queues kept together,
small results handed to Spark in few Arrow batches (issue 19: tasks follow bytes, not files)."""
from __future__ import annotations

import random

import pyarrow as pa

from msglake.pipelines.io import source as S
from msglake.pipelines.io.source import InputPartition, SourceOptions, pack, read_task
from msglake.samples.nsq_writer import NsqQueueWriter


def _ranges(queues: int, segments: int, size: int) -> list[tuple]:
    out = [(None, f"t{q}/t{q}-0.diskqueue.{n:06d}.dat", 0, size, False) for q in range(queues) for n in range(segments)]
    random.Random(3).shuffle(out)  # the planner sees them in no particular order
    return out


def test_small_segments_pack_into_few_tasks_a_queue_kept_together():
    ranges = _ranges(queues=40, segments=10, size=64 << 10)
    tasks = pack(ranges, 64 << 20)
    assert sorted(r for t in tasks for r in t) == sorted(ranges)  # every range once
    per_range = (64 << 10) + S.OPEN_COST_BYTES
    assert len(tasks) == -(-len(ranges) * per_range // (64 << 20))  # full tasks, one partly full
    # A queue's segments sit in one task, or in two where a task boundary falls inside it.
    spans = {}
    for i, task in enumerate(tasks):
        for r in task:
            spans.setdefault(r[1].split("/")[0], set()).add(i)
    assert all(len(s) == 1 or (len(s) == 2 and max(s) - min(s) == 1) for s in spans.values())
    assert sum(len(s) for s in spans.values()) <= 40 + len(tasks) - 1
    # A large range is a task of its own.
    assert [len(t) for t in pack([(None, "a", 0, 100 << 20, False), (None, "b", 0, 10, False)], 64 << 20)] == [1, 1]


def test_the_tails_of_many_queues_keep_every_core_busy():
    """A trigger's tails of a thousand queues (a few hundred bytes each) pack into one task by
    bytes alone; with ``min_tasks`` (the job's default parallelism) into as many tasks, queues
    still together, and a range is never cut to get there; a few tails stay one task."""
    tails = _ranges(queues=1000, segments=1, size=300)
    assert len(pack(tails, 64 << 20)) == 1
    tasks = pack(tails, 64 << 20, min_tasks=2)
    assert [len(t) for t in tasks] == [500, 500] and sorted(r for t in tasks for r in t) == sorted(tails)
    assert len(pack(_ranges(queues=2, segments=1, size=300), 64 << 20, min_tasks=2)) == 1  # too little to split
    assert len(pack(_ranges(queues=40, segments=10, size=64 << 10), 64 << 20, min_tasks=4)) == 4
    assert len(pack([(None, "a", 0, 100 << 20, False)], 64 << 20, min_tasks=4)) == 1


def test_a_task_over_many_small_segments_hands_spark_few_batches(tmp_path):
    ranges = []
    for q in range(6):
        with NsqQueueWriter(str(tmp_path), f"t{q}", 0, max_bytes_per_file=8 << 10) as w:
            while w.file_num < 8:
                w.put(b"x" * 300, header={"##trace_id": str(w.count + 1)}, timestamp_ns=1_793_500_000 * 10**9)
    opts = SourceOptions.parse({"format": "nsq-ext", "path": str(tmp_path)})
    codec = opts.codec()
    scan = codec.scan(str(tmp_path))
    ranges = [(seg.to_dict(), seg.path, 0, seg.committed_end, False) for seg in scan.segments if seg.committed_end]
    assert len(ranges) == 48
    batches = list(read_task(opts, InputPartition(ranges)))
    expected = pa.Table.from_batches([r.batch for seg in scan.segments if seg.committed_end
                                      for r in codec.decode(str(tmp_path), seg, 0, seg.committed_end)])
    assert len(batches) < 5 and pa.Table.from_batches(batches).equals(expected)


def test_a_large_chunk_goes_to_spark_on_its_own(tmp_path, monkeypatch):
    """A batch of at least half of BATCH_BYTES (a chunk of a large segment) is handed over as
    decoded, not copied into a larger batch; smaller ones around it are still gathered, in order."""
    monkeypatch.setattr(S, "BATCH_BYTES", 256 << 10)
    with NsqQueueWriter(str(tmp_path), "big", 0) as w:
        for i in range(1500):
            w.put(b"y" * 300, timestamp_ns=1_793_500_000 * 10**9 + i)
    for q in range(3):
        with NsqQueueWriter(str(tmp_path), f"t{q}", 0, max_bytes_per_file=8 << 10) as w:
            while w.file_num < 4:
                w.put(b"x" * 300, timestamp_ns=1_793_500_000 * 10**9)
    opts = SourceOptions.parse({"format": "nsq-ext", "path": str(tmp_path)})
    codec = opts.codec()
    scan = codec.scan(str(tmp_path))
    segs = sorted((s for s in scan.segments if s.committed_end), key=lambda s: (s.path.startswith("big"), s.path))
    ranges = [(seg.to_dict(), seg.path, 0, seg.committed_end, False) for seg in segs]  # small ones, then the big one
    batches = list(read_task(opts, InputPartition(ranges)))
    expected = pa.Table.from_batches([r.batch for seg in segs for r in codec.decode(str(tmp_path), seg, 0, seg.committed_end)])
    assert pa.Table.from_batches(batches).equals(expected)
    assert batches[-1].num_rows == 1500 and len(batches) >= 2  # the big segment's one chunk, alone and last
    assert all(b.get_total_buffer_size() >= 128 << 10 for b in batches[:-2])  # the small ones gathered


def test_the_drivers_decode_gives_the_same_rows_in_its_processes_as_in_its_own(tmp_path, monkeypatch):
    # Retry marking decodes each micro-batch in the driver (DriverReader.map): a large batch in
    # the driver's pool of processes, a small one in the driver itself. Both give the same
    # results, in the order of the batch's tasks; a task's error reaches the driver as raised.
    import pytest

    from msglake.pipelines.io.decoders import pool
    import functools

    from msglake.pipelines.io.sinks import batch_keys, chunk_keys, rows_with_hashes
    from msglake.samples.nsq import generate

    generate(str(tmp_path), 2000, max_bytes_per_file=32 << 10)
    options = {"format": "nsq-ext", "path": str(tmp_path), "minPartitions": "2", "splitBytes": str(64 << 10)}
    here = batch_keys(S.DriverReader(options).map(chunk_keys))
    monkeypatch.setattr(S, "POOL_BYTES", 0)
    there = batch_keys(S.DriverReader(options).map(chunk_keys))
    assert len(here.hashes) > 1000 and here.framed == there.framed and here.table_partitions == there.table_partitions
    assert here.rows.equals(there.rows)
    # The records that did not decode (every kind of corruption), which a batch's quarantine takes.
    assert len(here.undecoded) > 5 and here.undecoded.equals(there.undecoded)
    # A function of arguments given with it (functools.partial) reaches the processes too.
    wanted = set(here.hashes[:5].tolist())
    picked = S.DriverReader(options).map(functools.partial(rows_with_hashes, pa.array(sorted(wanted))))
    where = [(r["segment"], r["segmentPosition"]) for b in picked for r in b.select(["segment", "segmentPosition"]).to_pylist()]
    assert len(where) >= 5 and sorted(where) == sorted(
        (r["segment"], r["segmentPosition"]) for h, r in zip(here.hashes.tolist(), here.rows.to_pylist()) if h in wanted)
    with pytest.raises(ValueError, match="invalid literal"):
        pool().map(int, [("12",), ("twelve",)])
    # A task that cannot cross the pipe fails, and its process is replaced.
    with pytest.raises(RuntimeError, match="decoding process failed a task"):
        pool().map(int, [(lambda: 1,)])
    assert pool().map(int, [("12",), ("13",)]) == [12, 13]
    # A process that died is started again for the next call. (One pool object: a second pool()
    # call may already see the killed process gone and start a new pool, whose live process a
    # wait() would wait on for ever.)
    dying = pool()._procs[0]
    dying.kill()
    dying.wait()
    assert pool().map(int, [("1",), ("2",), ("3",)]) == [1, 2, 3]


def test_the_next_batch_read_ahead_is_taken_only_when_it_is_the_batch_asked_for(tmp_path, monkeypatch):
    # With retry marking on, while Spark writes a backlog's batch the driver's idle-priority pool
    # decodes the batch the source would plan next (DriverReader's ahead); the next map() takes
    # the tasks done only for the same function, start and end, and decodes the rest itself.
    import functools

    from msglake.pipelines.io import decoders
    from msglake.pipelines.io.sinks import batch_keys, chunk_keys, rows_with_hashes
    from msglake.samples.nsq import generate

    generate(str(tmp_path), 3000, max_bytes_per_file=32 << 10)
    options = {"format": "nsq-ext", "path": str(tmp_path), "minPartitions": "2", "splitBytes": str(64 << 10),
               "maxBytesPerTrigger": str(300 << 10)}
    monkeypatch.setattr(S, "POOL_BYTES", 0)  # every batch of two tasks or more is a large one
    # At idle priority the work may wait long on a busy machine (the next test checks that
    # priority); here it runs in the ordinary pool, so that each step below is done when asked.
    monkeypatch.setattr(decoders, "idle_pool", decoders.pool)
    planner = S.SegmentStreamReader(SourceOptions.parse(options))
    ends = [planner.initialOffset()]
    for _ in range(4):
        ends.append(planner.latestOffset(ends[-1], planner.getDefaultReadLimit()))
    assert ends[4]["segments"] != ends[3]["segments"]  # four batches, each with rows

    def fresh(start, end, each=chunk_keys):
        return batch_keys(S.DriverReader(options).map(each, start, end))

    def same(got, want):
        return got.rows.equals(want.rows) and got.undecoded.equals(want.undecoded) and got.framed == want.framed

    reader = S.DriverReader(options, ahead=chunk_keys)
    reader.warm()  # the first batch, from the source's beginning
    tasks = []
    for n, (start, end) in enumerate(zip(ends, ends[1:4])):
        reader._ahead.join()  # as if Spark's write took long enough
        tasks.append(len(reader._ahead._done))
        if n == 2:  # the batch comes with half of its tasks done: the driver decodes the others
            for i in list(reader._ahead._done)[::2]:
                del reader._ahead._done[i]
        assert same(batch_keys(reader.map(chunk_keys, start, end)), fresh(start, end))
    assert min(tasks) >= 2 and reader.taken_ahead == 3
    assert reader.tasks_ahead == tasks[0] + tasks[1] + tasks[2] - len(range(tasks[2])[::2])
    # Asked for with another end than foreseen (say, a segment grew): decoded as asked.
    reader._ahead.join()
    everything = planner.latestOffset(ends[3], S.ReadAllAvailable())
    assert everything != ends[4]
    assert same(batch_keys(reader.map(chunk_keys, ends[3], everything)), fresh(ends[3], everything))
    assert reader.taken_ahead == 3
    # Another function over the batch (the held copies' pass): not what was read ahead, which
    # stays for the batch it foresaw.
    reader.map(chunk_keys, ends[2], ends[3])
    reader._ahead.join()
    pick = functools.partial(rows_with_hashes, pa.array(sorted(fresh(ends[3], ends[4]).hashes[:3].tolist())))
    assert sum(b.num_rows for b in reader.map(pick, ends[3], ends[4])) >= 3 and reader.taken_ahead == 3
    assert same(batch_keys(reader.map(chunk_keys, ends[3], ends[4])), fresh(ends[3], ends[4]))
    assert reader.taken_ahead == 4
    # Closed (the query stopped): no more reading ahead.
    reader.close()
    reader.map(chunk_keys, ends[2], ends[3])
    assert reader._ahead is None


def test_the_pool_that_reads_ahead_runs_at_idle_priority_and_a_map_can_be_cancelled():
    import os
    import threading
    import time

    import pytest

    from msglake.pipelines.io.decoders import Cancelled, idle_pool, pool

    pids = idle_pool().pids()
    deadline = time.monotonic() + 60
    lowered = []
    while time.monotonic() < deadline:  # each process lowers itself first thing
        lowered = [os.sched_getscheduler(p) == os.SCHED_IDLE or os.getpriority(os.PRIO_PROCESS, p) == 19
                   for p in pids]
        if all(lowered):
            break
        time.sleep(0.01)
    assert lowered and all(lowered)
    assert not any(os.sched_getscheduler(p) == os.SCHED_IDLE for p in pool().pids())
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        pool().map(int, [("1",), ("2",)], cancel=stop)
    assert pool().map(int, [("1",), ("2",)]) == [1, 2]


def test_sparks_readers_freeze_what_a_worker_holds_and_the_drivers_decode_does_not(tmp_path):
    # A reused Spark Python worker collects its whole heap after each task: the readers' `read`
    # (which only Spark's workers call) moves what a task starts with into the permanent
    # generation. The driver's own decode (DriverReader.map) must not: a long-running driver's
    # frozen objects that later form garbage cycles would never be freed.
    import gc

    from msglake.samples.nsq import generate

    generate(str(tmp_path), 200, max_bytes_per_file=32 << 10)
    options = {"format": "nsq-ext", "path": str(tmp_path), "minPartitions": "2"}
    gc.unfreeze()
    try:
        assert sum(b.num_rows for b in S.DriverReader(options).map(lambda b: b)) > 100
        assert gc.get_freeze_count() == 0
        reader = S.SegmentBatchReader(SourceOptions.parse(options))
        parts = reader.partitions()
        rows = sum(b.num_rows for b in reader.read(parts[0]))
        assert rows > 0 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
