import datetime as dt

import numpy as np
from chispa import assert_df_equality
from pyspark.sql import Window, functions as F

from msglake.transforms.dedup import dedup_key, mark_producer_retries

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
COLS = "topic string, partition int, segment string, segmentPosition bigint, storeTimestamp timestamp, " \
       "uniqueId string, traceId string, bornHost string, body binary, deliveryCount int, systemCopy boolean"


def rows(spark, data, producer_unique_ids=None):
    """Message rows; ``producerUniqueId`` (the record's first UNIQ_KEY) null unless given, row by row."""
    df = spark.createDataFrame(data, COLS)
    if producer_unique_ids is None:
        return df.withColumn("producerUniqueId", F.lit(None).cast("string"))
    ids = spark.createDataFrame(list(enumerate(producer_unique_ids)), "i int, producerUniqueId string")
    return (df.withColumn("i", F.row_number().over(Window.orderBy("segmentPosition")) - 1)
            .join(ids, "i").drop("i"))


def at(seconds):
    return T0 + dt.timedelta(seconds=seconds)


def test_retries_are_marked_within_the_watermark(spark):
    batch = rows(spark, [
        ("t", 0, "s0", 0, at(0), None, "7", "h:1", b"a", 0, False),     # first copy
        ("t", 1, "s1", 10, at(5), None, "7", "h:1", b"a", 0, False),    # retry, other partition
        ("t", 0, "s0", 50, at(700), None, "7", "h:1", b"a", 0, False),  # past the watermark: not a retry
        ("t", 0, "s0", 90, at(1), None, "7", "h:2", b"a", 0, False),    # other producer
        ("t", 0, "s0", 120, at(2), None, "7", "h:1", b"b", 0, False),   # other body
        ("t", 0, "s0", 150, at(3), None, None, "h:1", b"a", 0, False),  # no trace id, no unique id: no key
        ("t", 0, "s0", 180, at(4), "U1", None, None, b"x", 0, False),   # first by unique id
        ("t", 0, "s0", 210, at(6), "U1", "9", None, b"y", 0, False),    # same unique id, different body
        ("t", 0, "s0", 230, at(7), "U1", None, None, b"x", 1, False),   # consumer redelivery (count+1): not a copy
        ("t", 0, "s0", 235, at(7), "U1", None, None, b"x", 0, True),    # broker-internal copy: not a retry
        (None, 0, "s0", 240, at(6), None, None, None, None, 0, False),  # None everywhere
    ])
    earlier = spark.createDataFrame([], "dedupKey string, storeTimestamp timestamp, partition int, segment string, "
                                        "segmentPosition bigint")
    out = mark_producer_retries(batch, earlier, 600).select(
        "segmentPosition", F.col("retryOf.segment").alias("seg"), F.col("retryOf.segmentPosition").alias("pos"))
    expected = spark.createDataFrame(
        [(0, None, None), (10, "s0", 0), (50, None, None), (90, None, None), (120, None, None),
         (150, None, None), (180, None, None), (210, "s0", 180), (230, None, None), (235, None, None), (240, None, None)],
        "segmentPosition bigint, seg string, pos bigint")
    assert_df_equality(out, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_first_copy_already_in_the_table_wins(spark):
    original = rows(spark, [("t", 0, "old", 4, at(0), None, "7", "h:1", b"a", 0, False)])
    earlier = original.select(dedup_key().alias("dedupKey"), "storeTimestamp", "partition", "segment", "segmentPosition")
    batch = rows(spark, [("t", 0, "new", 0, at(30), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 40, at(31), None, "7", "h:1", b"a", 0, False)])
    out = mark_producer_retries(batch, earlier, 600).orderBy("segmentPosition").collect()
    assert [(r.retryOf.segment, r.retryOf.segmentPosition) for r in out] == [("old", 4), ("old", 4)]
    assert out[0].dedupKey == out[1].dedupKey and len(out[0].dedupKey) == 64


def test_a_copy_stored_before_the_first_copy_in_the_table_is_its_retry(spark):
    # Store times out of order across batches: the copy already written stays the first copy.
    original = rows(spark, [("t", 1, "old", 4, at(10), None, "7", "h:1", b"a", 0, False)])
    earlier = original.select(dedup_key().alias("dedupKey"), "storeTimestamp", "partition", "segment", "segmentPosition")
    batch = rows(spark, [("t", 0, "new", 0, at(3), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 40, at(4), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 80, at(-700), None, "7", "h:1", b"a", 0, False)])  # beyond the watermark
    out = mark_producer_retries(batch, earlier, 600).orderBy("segmentPosition").collect()
    assert [tuple(r.retryOf) if r.retryOf else None for r in out] == [(1, "old", 4), (1, "old", 4), None]


def test_a_first_copy_in_the_table_far_from_the_batchs_copies_leaves_them_to_each_other(spark):
    # The first copy in the table is more than the watermark after the batch's copies of the key:
    # they are a message of their own, the later one the earlier one's retry.
    original = rows(spark, [("t", 1, "old", 4, at(400), None, "7", "h:1", b"a", 0, False)])
    earlier = original.select(dedup_key().alias("dedupKey"), "storeTimestamp", "partition", "segment", "segmentPosition")
    batch = rows(spark, [("t", 0, "new", 0, at(-300), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 40, at(-250), None, "7", "h:1", b"a", 0, False)])
    out = mark_producer_retries(batch, earlier, 600).orderBy("segmentPosition").collect()
    assert [tuple(r.retryOf) if r.retryOf else None for r in out] == [None, (0, "new", 0)]


def test_a_batch_decided_again_with_its_own_first_copies_in_the_table_marks_the_same_rows(spark):
    # A batch replayed after a crash finds its own first copies among those in the table (kept
    # by the sink after the write, the checkpoint not yet moved): none is a retry of itself.
    from msglake.transforms.dedup import RetryRule, retry_keys

    batch = rows(spark, [("t", 0, "new", 0, at(10), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 40, at(12), None, "7", "h:1", b"a", 0, False),
                         ("t", 0, "new", 80, at(700), None, "7", "h:1", b"a", 0, False)])
    rule, keys = RetryRule(600), retry_keys(batch)
    first_run = rule.decide(keys, keys.limit(0))
    again = rule.decide(keys, rule.firsts(first_run))
    marked = [(r.segmentPosition, r.retryOf.segmentPosition if r.retryOf else None)
              for r in again.orderBy("segmentPosition").collect()]
    assert marked == [(0, None), (40, 0), (80, None)]
    assert_df_equality(again, first_run, ignore_row_order=True)
    # A later copy within the watermark of both first copies (690 s apart) is the earlier one's retry.
    later = retry_keys(rows(spark, [("t", 1, "next", 0, at(380), None, "7", "h:1", b"a", 0, False)]))
    [r] = rule.decide(later, rule.firsts(first_run)).collect()
    assert (r.retryOf.segment, r.retryOf.segmentPosition) == ("new", 0)


def test_members_of_a_batch_send_are_not_each_others_retries(spark):
    # The broker appends the batch's UNIQ_KEY after each member's own: uniqueId (the last) is the
    # same for all; producerUniqueId (the first) tells them apart. A real retry repeats both.
    batch = rows(spark, [
        ("t", 0, "s0", 0, at(0), "BATCH", None, None, b"m0", 0, False),
        ("t", 0, "s0", 10, at(0), "BATCH", None, None, b"m1", 0, False),
        ("t", 0, "s0", 20, at(0), "BATCH", None, None, b"m2", 0, False),
        ("t", 0, "s0", 30, at(2), "BATCH", None, None, b"m1", 0, False),   # the producer sent m1 again
    ], producer_unique_ids=["OWN-0", "OWN-1", "OWN-2", "OWN-1"])
    earlier = spark.createDataFrame([], "dedupKey string, storeTimestamp timestamp, partition int, segment string, "
                                        "segmentPosition bigint")
    out = mark_producer_retries(batch, earlier, 600).select(
        "segmentPosition", F.col("retryOf.segmentPosition").alias("retryOf"))
    expected = spark.createDataFrame([(0, None), (10, None), (20, None), (30, 10)],
                                     "segmentPosition bigint, retryOf bigint")
    assert_df_equality(out, expected, ignore_row_order=True, ignore_nullable=True)


def test_deciding_among_the_keys_that_may_repeat_only_marks_the_same_rows(spark):
    # The ingest sink decides a batch's retries among the keys `repeated` names from their hashes
    # (a 60-bit prefix, so possibly more than repeat), with the first copies in the table of
    # those keys only: the same retries as deciding over every key.
    from msglake.transforms.dedup import RetryRule, key_hash, repeated, retry_keys

    earlier = retry_keys(rows(spark, [("t", 0, "old", 4, at(0), None, "7", "h:1", b"a", 0, False),
                                      ("t", 0, "old", 8, at(1), None, "8", "h:1", b"a", 0, False),
                                      ("t", 0, "old", 12, at(50), None, "10", "h:1", b"a", 0, False),
                                      ("t", 0, "old", 16, at(50), None, "11", "h:1", b"a", 0, False)]))
    keys = retry_keys(rows(spark, [
        ("t", 0, "new", 0, at(30), None, "7", "h:1", b"a", 0, False),    # retry of old@4
        ("t", 1, "new", 0, at(31), None, "9", "h:1", b"a", 0, False),    # first copy ...
        ("t", 1, "new", 40, at(32), None, "9", "h:1", b"a", 0, False),   # ... and its retry
        ("t", 0, "new", 90, at(900), None, "8", "h:1", b"a", 0, False),  # past old@8's watermark
        ("t", 0, "new", 120, at(33), "U1", None, None, b"x", 0, False),  # once only
        ("t", 1, "new", 80, at(20), None, "10", "h:1", b"a", 0, False),  # stored before old@12: its retry
    ]))
    rule = RetryRule(600)
    expected = rule.retries(rule.decide(keys, earlier))
    assert sorted((r.partition, r.segmentPosition) for r in expected.collect()) == [(0, 0), (1, 40), (1, 80)]
    hashes = [np.array([r[0] for r in k.select(key_hash()).collect()], dtype=np.int64) for k in (keys, earlier)]
    found = repeated(hashes[0], [np.sort(hashes[1])])
    assert len(found) == 4  # 7, 8, 9 and 10; not U1, nor 11 (in the table only)
    maybe = [int(h) for h in found]
    narrowed = rule.decide(keys.where(key_hash().isin(maybe)), earlier.where(key_hash().isin(maybe)))
    assert_df_equality(rule.retries(narrowed), expected, ignore_row_order=True)


def test_in_sorted_finds_what_any_piece_holds():
    # The sink asks which candidates' first copies are in the table by a search of each sorted
    # piece of hashes: the answer must be set membership, at int64's ends and with empty pieces.
    from msglake.transforms.dedup import in_sorted, repeated

    rng = np.random.default_rng(7)
    edges = np.array([np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max], dtype=np.int64)
    pieces = [np.sort(np.concatenate([rng.integers(-2**63, 2**63 - 1, 500, dtype=np.int64), edges[k::2]]))
              for k in range(2)] + [np.array([], np.int64)]
    values = np.concatenate([rng.choice(pieces[0], 50), rng.choice(pieces[1], 50), edges,
                             rng.integers(-2**63, 2**63 - 1, 200, dtype=np.int64)])
    held = set(np.concatenate(pieces).tolist())
    assert in_sorted(values, pieces).tolist() == [v in held for v in values.tolist()]
    assert not in_sorted(values, []).any() and not in_sorted(values[:0], pieces).size
    fresh = rng.integers(-2**63, 2**63 - 1, 20, dtype=np.int64)  # in no piece; the first three twice
    batch = np.concatenate([values[:10], values[:3], fresh, fresh[:3]])
    want = sorted({int(v) for v in batch if v in held or (batch == v).sum() > 1})
    assert repeated(batch, pieces).tolist() == want and set(fresh[:3].tolist()) <= set(want)


def test_the_drivers_keys_are_sparks_on_both_paths(spark, tmp_path):
    # The ingest sink decides retries from keys made in the driver (arrow_keys) and writes the
    # keys Spark makes (dedup_key): they must be the same strings, with the same key_hash, for
    # rows of every kind of key: own UNIQ_KEY with or without deliveryCount, a topic missing,
    # trace ids with and without bornHost or body, system copies, rows with no key.
    import pyarrow as pa

    from msglake.schemas.source import SOURCE_SCHEMA
    from msglake.transforms.dedup import KEY_PARTS, arrow_keys, key_hash

    data = [("t", 0, "s", 0, at(0), "U1", None, None, b"a", 0, False),
            ("t", 0, "s", 1, at(0), "U1", None, None, b"a", None, None),
            (None, 0, "s", 2, at(0), "U2", "7", "h:1", b"a", 3, False),
            ("t", 0, "s", 3, at(0), None, "7", "h:1", b"paid", 0, False),
            ("t", 0, "s", 4, at(0), None, "7", None, b"", 0, False),
            ("t", 0, "s", 5, at(0), None, "7", "h:1", None, 0, False),
            ("t", 0, "s", 6, at(0), "U3", "7", "h:1", b"a", 0, True),
            ("t", 0, "s", 7, at(0), None, None, "h:1", b"a", 0, False),
            ("tópico", 1, "s", 8, at(0), "Ü", None, None, b"\xff", 7, False)]
    df = rows(spark, data, producer_unique_ids=[None, "P1", None, None, None, None, None, "P2", None])
    want = [(r.dedupKey, r.h) for r in df.orderBy("segmentPosition")
            .select(dedup_key().alias("dedupKey"), key_hash(dedup_key()).alias("h")).collect()]
    assert [k is None for k, _ in want] == [False] * 6 + [True] + [False] * 2
    table = df.orderBy("segmentPosition").select(*KEY_PARTS).toArrow()
    batch = pa.RecordBatch.from_arrays([table.column(n).combine_chunks().cast(SOURCE_SCHEMA.field(n).type)
                                        for n in KEY_PARTS], names=list(KEY_PARTS))
    for native in (True, False):
        got = arrow_keys(batch, native=native)
        got.validate(full=True)  # offsets monotonic and within their data
        assert list(zip(got.column("dedupKey").to_pylist(), got.column("keyHash").to_pylist())) == want, native
    # A slice (an Arrow offset into its buffers) reads the right rows.
    assert arrow_keys(batch.slice(3, 4), native=True).column("dedupKey").to_pylist() == [k for k, _ in want[3:7]]
