"""Producer retries: the same message published twice, marked (never removed).

A producer that times out waiting for the broker's answer publishes again; the broker then
stores two copies. Two rows are copies when they share a key:

- the message's own RocketMQ UNIQ_KEY (``producerUniqueId``, else ``uniqueId``) with
  ``deliveryCount``, when the source has one (a consumer retry carries the same UNIQ_KEY with
  RECONSUMETIMES + 1: a new delivery, not a copy; semantics.md §6). Not ``uniqueId`` alone:
  the members of a batch send all carry the batch's UNIQ_KEY last, which is what ``uniqueId``
  reports, and they are distinct messages, never each other's retries;
- else, for a message with a ``traceId``: topic + trace id + producer (``bornHost``) + body;
- none for a broker-internal copy (``systemCopy``).

Within ``watermark_seconds`` of the first copy's ``storeTimestamp``, later copies get
``retryOf`` = the location of the first copy. Replays of the same record are a different
matter: those never reach the table at all (idempotent writes).
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window, functions as F

RETRY_LOCATION = ("partition", "segment", "segmentPosition")


def dedup_key() -> Column:
    """The copy-identity of a message row (a SHA-256 hex string), or null when it has none."""
    own_unique_id = F.coalesce(F.col("producerUniqueId"), F.col("uniqueId"))
    by_unique = F.sha2(
        F.concat_ws("|", F.lit("u"), F.col("topic"), own_unique_id, F.col("deliveryCount").cast("string")), 256
    )
    by_trace = F.sha2(
        F.concat_ws("|", F.lit("t"), F.col("topic"), F.col("traceId"), F.coalesce(F.col("bornHost"), F.lit("")),
                    F.sha2(F.col("body"), 256)),
        256,
    )
    # A broker's internal copies (timer rolls, transaction check put-backs) repeat a UNIQ_KEY
    # by design: they are marked systemCopy, not producer retries.
    return (
        F.when(F.coalesce(F.col("systemCopy"), F.lit(False)), F.lit(None).cast("string"))
        .when(own_unique_id.isNotNull(), by_unique)
        .when(F.col("traceId").isNotNull(), by_trace)
        .otherwise(F.lit(None).cast("string"))
    )


def _first(df: DataFrame) -> Column:
    return F.struct(F.col("storeTimestamp").alias("ts"), *[F.col(c) for c in RETRY_LOCATION])


def retry_keys(batch: DataFrame, key: Column | None = None) -> DataFrame:
    """What deciding retries needs of a batch of message rows: ``dedupKey``, ``storeTimestamp``
    and the location, for the rows that have a key. Narrow, so a caller can keep it (checkpoint)
    and decide without decoding the batch again. ``key``: a :func:`dedup_key` made before (a
    caller that plans many batches makes it once; each made costs JVM round trips)."""
    key = dedup_key() if key is None else key
    return (batch.select(key.alias("dedupKey"), "storeTimestamp", *RETRY_LOCATION)
            .where(F.col("dedupKey").isNotNull()))


def _copies(keys: DataFrame, earlier: DataFrame) -> DataFrame:
    """Every copy a retry is decided among: (``dedupKey``, ``first``) of the batch's keys and of
    the first copies before it."""
    return (keys.select("dedupKey", _first(keys).alias("first"))
            .unionByName(earlier.select("dedupKey", _first(earlier).alias("first"))))


def _key_hash() -> Column:
    return F.xxhash64("dedupKey")


def repeat_candidates(keys: DataFrame, earlier: DataFrame) -> DataFrame:
    """``keyHash`` of the keys that may occur more than once among ``keys`` and ``earlier``
    (parameters: :func:`decide_retries`): only those can have a retry, usually a small part of a
    batch. A superset of the repeated keys, as two keys may share a hash.

    Grouped by a 64-bit hash, not by the key with the first copy's location: that aggregate
    (a minimum over a struct) runs as a sort, this one as a hash aggregate (1.07M keys, local[2]:
    a sort 2.9-3.4 s, this 1.4-1.8 s)."""
    return (_copies(keys, earlier).groupBy(_key_hash().alias("keyHash")).count()
            .where(F.col("count") > 1).select("keyHash"))


def decide_retries(keys: DataFrame, earlier: DataFrame, watermark_seconds: int,
                   candidates: DataFrame | None = None) -> DataFrame:
    """``keys`` (:func:`retry_keys` of a batch) with ``retryOf``: the location of the first copy
    for a retry, null for a first copy. One plan gives a caller both the batch's retries and its
    first copies.

    Parameters
    ----------
    keys : DataFrame
        The batch's rows with a key (``dedupKey``, ``storeTimestamp``, location).
    earlier : DataFrame
        First copies already in the table: ``dedupKey``, ``storeTimestamp`` and the
        location columns, for keys that may repeat in the batch (the caller limits it to the
        watermark window).
    watermark_seconds : int
        How long after a first copy a later one still counts as its retry.
    candidates : DataFrame, optional
        :func:`repeat_candidates` of the same keys, small enough to broadcast (the caller knows
        its size): the first copies are then found for those keys only and broadcast, so the
        batch's keys are not shuffled again. Without it, for every key.
    """
    first = F.col("first")
    is_self = (first["partition"] == F.col("partition")) & (first["segment"] == F.col("segment")) & (
        first["segmentPosition"] == F.col("segmentPosition")
    )
    within = F.col("storeTimestamp") <= first["ts"] + F.make_interval(secs=F.lit(watermark_seconds))
    retry_of = F.when(first.isNotNull() & ~is_self & within,
                      F.struct(*[first[c].alias(c) for c in RETRY_LOCATION])).alias("retryOf")
    if candidates is None:
        # Each key's first copy by a window over the copies, not an aggregate joined back: one
        # partitioning of the copies, which inputs already in one partition each (a small batch's,
        # coalesced) keep without any shuffle; the join's two sides were shuffled even then, as
        # the batch's keys have no size estimate (4 Spark jobs -> 2 for a streaming trigger's batch).
        mine = "_batchKey"
        copies = (keys.select(*keys.columns, F.lit(True).alias(mine))
                  .unionByName(earlier.select(*keys.columns, F.lit(False).alias(mine))))
        by_key = Window.partitionBy("dedupKey")
        return (copies.withColumn("first", F.min(_first(copies)).over(by_key))
                .where(F.col(mine)).select(*keys.columns, retry_of))
    copies = _copies(keys, earlier).join(F.broadcast(candidates), _key_hash() == candidates["keyHash"], "left_semi")
    # Earliest store time, then location; broadcast back to the keys, which are not shuffled again.
    firsts = F.broadcast(copies.groupBy("dedupKey").agg(F.min("first").alias("first")))
    # A key without a first copy here is not a candidate: it occurs once, so it is its own first.
    return keys.join(firsts, on="dedupKey", how="left").select(*keys.columns, retry_of)


def find_retries(keys: DataFrame, earlier: DataFrame, watermark_seconds: int) -> DataFrame:
    """The retries among ``keys``: their location and ``retryOf`` (parameters: :func:`decide_retries`)."""
    return retries_of(decide_retries(keys, earlier, watermark_seconds))


def retries_of(decided: DataFrame) -> DataFrame:
    """The retries of :func:`decide_retries`'s rows, as :func:`mark_retries` takes them."""
    return decided.where(F.col("retryOf").isNotNull()).select(*RETRY_LOCATION, "retryOf")


def mark_retries(batch: DataFrame, retries: DataFrame, key: Column | None = None) -> DataFrame:
    """Add ``dedupKey`` and ``retryOf`` to a batch of message rows, given its retries
    (:func:`find_retries`). They are joined by broadcast: a batch holds few (a producer resends
    only what timed out), and even a batch of nothing else is bounded by the trigger's budget.
    ``key``: as for :func:`retry_keys`."""
    keyed = batch.withColumn("dedupKey", dedup_key() if key is None else key)
    return keyed.join(F.broadcast(retries), on=list(RETRY_LOCATION), how="left")


def mark_producer_retries(batch: DataFrame, earlier: DataFrame, watermark_seconds: int) -> DataFrame:
    """Add ``dedupKey`` and ``retryOf`` to a batch of message rows, in one plan (the ingest sink
    reaches the same result with the batch's keys checkpointed in between). Parameters: as
    :func:`find_retries`, ``batch`` being the new message rows (no ``dedupKey``/``retryOf`` yet)."""
    return mark_retries(batch, find_retries(retry_keys(batch), earlier, watermark_seconds))
