"""Writes made once per micro-batch (OnceWriter), and the first copies the ingest sink keeps
between its batches (FirstCopies) against what the table holds."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import time

import numpy as np
from pyspark.sql import functions as F

from msglake.pipelines.io.first_copies import EPOCH, MAX_PIECES, FirstCopies
from msglake.pipelines.io.once import (OnceWriter, _actions, checksum_file, log_version, made_empty,
                                      recorded_transaction)
from msglake.transforms.dedup import key_hash, repeated

T0 = dt.datetime(2026, 1, 1)


def rows(spark, *ids):
    return spark.createDataFrame([(i,) for i in ids], "id int")


def ids(spark, path):
    return sorted(r.id for r in spark.read.format("delta").load(path).collect())


def test_a_batch_is_written_once_within_a_run_and_after_a_restart(spark, tmp_path):
    path = str(tmp_path / "t")
    run = OnceWriter("app")
    assert run.write(rows(spark, 1), path, 0) and run.write(rows(spark, 2), path, 1)
    assert not run.write(rows(spark, 2), path, 1)  # the same run asked again
    rows(spark, 99).write.format("delta").mode("append").save(path)  # another writer in between
    restarted = OnceWriter("app")  # a restart: batch 1 is redone, from the table's history alone
    assert not restarted.write(rows(spark, 2), path, 1)
    assert restarted.write(rows(spark, 3), path, 2)
    assert not OnceWriter("app").write(rows(spark, 3), path, 2)
    assert OnceWriter("other-app").write(rows(spark, 4), path, 2)  # a new checkpoint: its own batch ids
    assert ids(spark, path) == [1, 2, 3, 4, 99]


def _legacy(spark, path, *batches):
    """Batches written as an older msglake wrote them: Delta's txn options, no userMetadata."""
    for batch in batches:
        rows(spark, batch).write.format("delta").mode("append").option("txnAppId", "app") \
            .option("txnVersion", batch).save(path)


def test_delta_still_judges_a_table_written_with_its_transaction_options_alone(spark, tmp_path):
    """A lake written by an older msglake: Delta's txn actions, no userMetadata."""
    path = str(tmp_path / "t")
    _legacy(spark, path, 0, 1)
    writer = OnceWriter("app")
    assert not writer.write(rows(spark, 1), path, 1)
    assert writer.write(rows(spark, 2), path, 2)
    assert ids(spark, path) == [0, 1, 2]


def _jobs(spark, write) -> tuple[bool, int]:
    """``write()``'s answer and how many Spark jobs it ran."""
    sc = spark.sparkContext
    group = f"once-{time.monotonic_ns()}"
    sc.setJobGroup(group, "test_once")
    try:
        answer = write()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return answer, len(sc.statusTracker().getJobIdsForGroup(group))


def test_the_first_write_of_a_run_takes_the_apps_transaction_from_the_commits_checksum(spark, tmp_path):
    """Delta's own lookup of the app's transaction rebuilds the table's state: three Spark jobs
    before the write's own. The newest commit's checksum file holds the same answer."""
    path, checkpoint = str(tmp_path / "t"), str(tmp_path / "checkpoint")
    os.mkdir(checkpoint)
    _legacy(spark, path, 0, 1)
    version = log_version(path)
    assert recorded_transaction(path, version, "app") == 1 and recorded_transaction(path, version, "other") == -1
    assert _jobs(spark, lambda: OnceWriter("app", checkpoint).write(rows(spark, 1), path, 1)) == (False, 0)
    written, jobs = _jobs(spark, lambda: OnceWriter("app", checkpoint).write(rows(spark, 2), path, 2))
    assert written and jobs < 3  # the write's own (one, on this Spark and Delta)
    assert ids(spark, path) == [0, 1, 2]
    # Without the checksum (a writer that left none) Delta judges, as before: its lookup's jobs come back.
    _legacy(spark, path, 3)
    os.remove(checksum_file(path, log_version(path)))
    assert recorded_transaction(path, log_version(path), "app") is None
    assert not OnceWriter("app", checkpoint).write(rows(spark, 3), path, 3)
    assert OnceWriter("app", checkpoint).write(rows(spark, 4), path, 4)
    assert ids(spark, path) == [0, 1, 2, 3, 4]
    assert _txn(path, log_version(path)) == {"appId": "app", "version": 4}  # passed the options
    assert _txn(path, log_version(path) - 2) is None  # batch 2: written without them


def _txn(path, version):
    """The transaction action of commit ``version`` (appId, version), None without one."""
    txn = next((a["txn"] for a in _actions(path, version) if "txn" in a), None)
    return None if txn is None else {"appId": txn["appId"], "version": txn["version"]}


def test_the_checksum_says_nothing_without_the_whole_list_or_with_a_retention(tmp_path):
    import json

    (tmp_path / "_delta_log").mkdir()

    def checksum(**fields):
        with open(checksum_file(str(tmp_path), 7), "w") as f:
            json.dump({"txnId": "x", "tableSizeBytes": 0, **fields}, f)
        return recorded_transaction(str(tmp_path), 7, "app")

    listed = [{"appId": "app", "version": 5, "lastUpdated": 0}, {"appId": "b", "version": 9, "lastUpdated": 0}]
    assert checksum(setTransactions=listed) == 5
    assert checksum(setTransactions=listed[1:]) == -1
    assert checksum() is None  # Delta left the list out
    assert checksum(setTransactions=listed,
                    metadata={"configuration": {"delta.setTransactionRetentionDuration": "interval 1 days"}}) is None
    assert recorded_transaction(str(tmp_path), 8, "app") is None  # no checksum file


def test_two_runs_starting_again_from_one_batch_write_it_once(spark, tmp_path, monkeypatch):
    """Both look at the table before either commits: the lock on the checkpoint makes the second
    wait for the first's commit, and then find it."""
    import threading

    from msglake.pipelines.io import once

    path, checkpoint = str(tmp_path / "t"), str(tmp_path / "checkpoint")
    os.mkdir(checkpoint)
    assert OnceWriter("app", checkpoint).write(rows(spark, 0), path, 0)
    looked = threading.Event()
    real = once.recorded_transaction

    def slow(*args):
        answer = real(*args)
        looked.set()
        time.sleep(3)  # the other run reaches its own look meanwhile, unless it waits for the lock
        return answer

    monkeypatch.setattr(once, "recorded_transaction", slow)
    answers = []
    failures = []

    def run():
        try:
            answers.append(OnceWriter("app", checkpoint).write(rows(spark, 1), path, 1))
        except BaseException as e:  # noqa: BLE001 -- reported by the test's thread
            failures.append(e)

    runs = [threading.Thread(target=run) for _ in range(2)]
    runs[0].start()
    assert looked.wait(60)
    runs[1].start()
    for r in runs:
        r.join(120)
    assert not failures and sorted(answers) == [False, True]
    assert ids(spark, path) == [0, 1]


def test_a_transaction_retention_leaves_the_judgement_to_delta(spark, tmp_path):
    path, checkpoint = str(tmp_path / "t"), str(tmp_path / "checkpoint")
    os.mkdir(checkpoint)
    spark.sql(f"CREATE TABLE delta.`{path}` (id int) USING delta "
              "TBLPROPERTIES ('delta.setTransactionRetentionDuration' = 'interval 1 days')")
    _legacy(spark, path, 0)
    assert recorded_transaction(path, log_version(path), "app") is None
    assert not OnceWriter("app", checkpoint).write(rows(spark, 0), path, 0)
    assert OnceWriter("app", checkpoint).write(rows(spark, 1), path, 1)
    assert ids(spark, path) == [0, 1]
    assert _txn(path, log_version(path)) == {"appId": "app", "version": 1}  # Delta judged it


def test_the_history_search_stops_at_commits_older_than_the_batch(spark, tmp_path):
    path, checkpoint = str(tmp_path / "t"), tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    assert OnceWriter("app").write(rows(spark, 1), path, 5)
    for i in range(20):  # more commits than the search's first page, by another writer
        rows(spark, 100 + i).write.format("delta").mode("append").save(path)
    offsets = checkpoint / "offsets" / "6"

    def planned_at(seconds):  # what Spark writes: a version line, then the batch's metadata
        offsets.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":%d,"conf":{}}\n{}\n' % (seconds * 1000))

    planned_at(time.time())
    assert OnceWriter("app", str(checkpoint)).last_committed(path, 6) == 5
    # The file's own time does not count (a copied checkpoint has new ones): the time inside does.
    os.utime(offsets, (time.time() + 3600,) * 2)
    assert OnceWriter("app", str(checkpoint)).last_committed(path, 6) == 5
    # Batch 6 planned long after every commit: none of them can be its own.
    planned_at(time.time() + 3600)
    assert OnceWriter("app", str(checkpoint)).last_committed(path, 6) == -1


def _message(key, second, position):
    return (key, T0 + dt.timedelta(seconds=second), 0, "seg", position, None)


SCHEMA = ("dedupKey string, storeTimestamp timestamp, partition int, segment string, segmentPosition bigint, "
          "retryOf struct<partition:int,segment:string,segmentPosition:bigint>")


def _window(spark, path, since, watermark):
    return sorted(tuple(r) for r in spark.read.format("delta").load(path)
                  .where(F.col("storeTimestamp") >= F.lit(since - dt.timedelta(seconds=watermark)))
                  .where("dedupKey IS NOT NULL AND retryOf IS NULL")
                  .select("dedupKey", "storeTimestamp", "partition", "segment", "segmentPosition").collect())


def _hashes(keys):
    """``transforms.dedup.key_hash`` of each row's ``dedupKey``, as the sink's driver pass makes them."""
    return np.array([r[0] for r in keys.select(key_hash()).collect()], dtype=np.int64)


def test_first_copies_kept_between_batches_stand_for_the_tables_window(spark, tmp_path):
    path, watermark = str(tmp_path / "messages"), 60
    # Keys of 15 hex digits or more, as dedupKeys are (key_hash reads the first 15).
    key = "{:0>64}".format
    spark.createDataFrame([_message(key("old"), 0, 0)], SCHEMA).write.format("delta").save(path)
    firsts = FirstCopies(path, watermark)

    def check(second):
        since = T0 + dt.timedelta(seconds=second)
        window = _window(spark, path, since, watermark)
        known = firsts.hashes(spark, since)
        # Every first copy of the window is among the pieces' hashes; keys never written are not.
        hashes = _hashes(spark.createDataFrame([(r[0],) for r in window], "dedupKey string")) if window else \
            np.array([], np.int64)
        fresh = _hashes(spark.createDataFrame([(key("new1"),), (key("new2"),)], "dedupKey string"))
        assert sorted(repeated(np.concatenate([hashes, fresh]), known)) == sorted(set(hashes))
        # The rows of those hashes are read from the table, the window's own.
        if len(hashes):
            assert sorted(tuple(r) for r in firsts.rows(spark, since, hashes).collect()) == window
        return since

    most = 0
    for batch in range(20):  # a window of 12 batches: the pieces pass MAX_PIECES, are merged, then dropped
        second = 10 + batch * 5
        since = check(second)
        new = spark.createDataFrame([_message(key(f"k{batch}"), second, batch + 1),
                                     _message(None, second, 100 + batch)], SCHEMA)
        before = log_version(path)
        new.write.format("delta").mode("append").save(path)
        firsts.wrote(since, since, before, log_version(path), _hashes(new.where("dedupKey IS NOT NULL")),
                     np.array([(since.replace(tzinfo=dt.timezone.utc) - EPOCH) // dt.timedelta(microseconds=1)]))
        most = max(most, len(firsts.pieces))
    assert firsts.reads == 1 and most == MAX_PIECES  # only the first batch read the table; merged once full
    # The kept hashes are complete from ``low`` on: a window starting there uses them, one
    # starting a second earlier reads the table.
    low = (firsts.low - T0.astimezone(dt.timezone.utc)).total_seconds() + watermark
    assert low > 10
    check(low)
    assert firsts.reads == 1
    check(low - 1)
    assert firsts.reads == 2

    # Another writer's commit: the next batch reads the table and finds its row.
    theirs = key("theirs")
    spark.createDataFrame([_message(theirs, 200, 999)], SCHEMA).write.format("delta").mode("append").save(path)
    since = check(205)
    assert firsts.reads == 3
    [row] = firsts.rows(spark, since, _hashes(spark.createDataFrame([(theirs,)], "dedupKey string"))).collect()
    assert tuple(row) == (theirs, T0 + dt.timedelta(seconds=200), 0, "seg", 999)


def test_first_copies_rows_come_from_the_pieces_that_keep_them(spark, tmp_path, monkeypatch):
    """A repeat's first copies come from the rows the sink kept of its own batches' first copies,
    with no read of the table, merged pieces included; from the table for a piece of hashes alone
    (read from the table, a batch whose rows a rule held, rows let go past ROWS_KEPT). Either way
    they are the window's."""
    import pyarrow as pa

    from msglake.pipelines.io import first_copies

    path, watermark = str(tmp_path / "messages"), 60

    def key(name):  # keys of distinct hashes, as real ones are (key_hash reads the first 15 hex digits)
        return hashlib.sha256(name.encode()).hexdigest()

    def instant(t):  # a naive time as Spark takes it from Python: local time
        return t.astimezone(dt.timezone.utc)

    spark.createDataFrame([_message(key("old"), 0, 0)], SCHEMA).write.format("delta").save(path)
    firsts = FirstCopies(path, watermark)

    def kept_rows(*messages):
        return pa.table({"keyHash": [int(m[0][:15], 16) for m in messages], "dedupKey": [m[0] for m in messages],
                         "storeTimestamp": pa.array([instant(m[1]) for m in messages],
                                                    first_copies.ROWS.field("storeTimestamp").type),
                         "partition": pa.array([m[2] for m in messages], pa.int32()),
                         "segment": [m[3] for m in messages], "segmentPosition": [m[4] for m in messages]},
                        schema=first_copies.ROWS)

    def write(batch, second, rows_known=True):
        since = T0 + dt.timedelta(seconds=second)
        firsts.hashes(spark, since)
        first, retry = _message(key(f"k{batch}"), second, batch), _message(key(f"k{batch}"), second, 100 + batch)
        retry = retry[:5] + ((0, "seg", batch),)
        before = log_version(path)
        spark.createDataFrame([first, retry], SCHEMA).write.format("delta").mode("append").save(path)
        micros = (instant(since) - EPOCH) // dt.timedelta(microseconds=1)
        firsts.wrote(since, since, before, log_version(path), _hashes(spark.createDataFrame([first], SCHEMA)),
                     np.array([micros]), kept_rows(first) if rows_known else None)

    def check(second, *names):
        since = T0 + dt.timedelta(seconds=second)
        firsts.hashes(spark, since)
        asked = _hashes(spark.createDataFrame([(key(n),) for n in names], "dedupKey string"))
        got = sorted(tuple(r) for r in firsts.rows(spark, since, asked).collect())
        assert got == [w for w in _window(spark, path, since, watermark) if w[0] in {key(n) for n in names}]
        return got

    write(1, 10)
    write(2, 20)
    reads = firsts.row_reads
    assert len(check(30, "k1", "k2")) == 2 and firsts.row_reads == reads  # both kept: no read
    assert len(check(30, "old", "k1")) == 2 and firsts.row_reads == reads + 1  # "old": the table's piece
    write(3, 30, rows_known=False)  # a batch whose rows a rule may have held back
    assert len(check(40, "k3")) == 1 and firsts.row_reads == reads + 2
    assert len(check(40, "k2")) == 1 and firsts.row_reads == reads + 2
    for batch in range(4, 4 + MAX_PIECES - 3):  # past MAX_PIECES: merged, those with rows apart
        write(batch, 30 + batch)
    assert len(firsts.pieces) == 2 and sum(p.rows is None for p in firsts.pieces) == 1
    assert len(check(45, "k1", "k2", f"k{MAX_PIECES}")) == 3 and firsts.row_reads == reads + 2
    assert len(check(45, "k3", "k4")) == 2 and firsts.row_reads == reads + 3
    monkeypatch.setattr(first_copies, "ROWS_KEPT", 1)
    write(20, 50)  # the newest piece keeps its row, the older ones let theirs go
    assert len(check(55, "k20")) == 1 and firsts.row_reads == reads + 3
    assert len(check(55, "k2")) == 1 and firsts.row_reads == reads + 4


def test_a_table_is_made_empty_until_a_commit_adds_a_file(spark, tmp_path):
    # What lets the first batch of an ingest skip reading first copies and consumer offsets.
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import MESSAGES_TABLE
    from tests.conftest import make_settings

    path = ensure_table(spark, make_settings(tmp_path / "lake"), MESSAGES_TABLE)
    assert log_version(path) == 0 and made_empty(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('msglake.test' = '1')")
    assert log_version(path) == 1 and not made_empty(path)  # no file added, but no longer as made
    written = str(tmp_path / "written")
    spark.createDataFrame([_message("k", 0, 1)], SCHEMA).write.format("delta").save(written)
    assert log_version(written) == 0 and not made_empty(written)
    assert not made_empty(str(tmp_path / "nothing-here"))


def test_a_checkpoint_that_takes_no_lock_leaves_the_judgement_to_delta(spark, tmp_path, monkeypatch):
    """A mount without flock: the first write passes Delta's options instead of failing."""
    import errno

    from msglake.pipelines.io import once

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    path, checkpoint = str(tmp_path / "t"), str(tmp_path / "checkpoint")
    os.mkdir(checkpoint)
    assert OnceWriter("app", checkpoint).write(rows(spark, 0), path, 0)
    monkeypatch.setattr(once.fcntl, "flock", no_locks)
    assert OnceWriter("app", checkpoint).write(rows(spark, 1), path, 1)
    assert _txn(path, log_version(path)) == {"appId": "app", "version": 1}
    assert not OnceWriter("app", checkpoint).write(rows(spark, 1), path, 1)
    assert ids(spark, path) == [0, 1]
