"""Writes made once per micro-batch (OnceWriter)."""
from __future__ import annotations

import os
import time

from msglake.pipelines.io.once import OnceWriter


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


def test_delta_still_judges_a_table_written_with_its_transaction_options_alone(spark, tmp_path):
    """A lake written by an older msglake: Delta's txn actions, no userMetadata."""
    path = str(tmp_path / "t")
    for batch in (0, 1):
        rows(spark, batch).write.format("delta").mode("append").option("txnAppId", "app") \
            .option("txnVersion", batch).save(path)
    writer = OnceWriter("app")
    assert not writer.write(rows(spark, 1), path, 1)
    assert writer.write(rows(spark, 2), path, 2)
    assert ids(spark, path) == [0, 1, 2]


def test_the_history_search_stops_at_commits_older_than_the_batch(spark, tmp_path):
    path, checkpoint = str(tmp_path / "t"), tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    assert OnceWriter("app").write(rows(spark, 1), path, 5)
    for i in range(20):  # more commits than the search's first page, by another writer
        rows(spark, 100 + i).write.format("delta").mode("append").save(path)
    offsets = checkpoint / "offsets" / "6"
    offsets.write_text("v1\n")
    assert OnceWriter("app", str(checkpoint)).last_committed(spark, path, 6) == 5
    # Batch 6 planned long after every commit: none of them can be its own.
    later = time.time() + 3600
    os.utime(offsets, (later, later))
    assert OnceWriter("app", str(checkpoint)).last_committed(spark, path, 6) == -1

