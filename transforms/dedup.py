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

Within ``watermark_seconds`` of the first copy's ``storeTimestamp``, the other copies get
``retryOf`` = the location of the first copy. The first copy is the earliest stored, except that
a first copy already in the table stays first for the copies a later batch brings within the
watermark of it, even those stored before it: queues read at different paces bring store times
out of order, and a row once written is not changed, so ``WHERE retryOf IS NULL`` still keeps one
copy of each message. Replays of the same record are a different matter: those never reach the
table at all (idempotent writes).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window, functions as F

RETRY_LOCATION = ("partition", "segment", "segmentPosition")
#: The columns of :func:`retry_keys`' rows (and of the first copies a batch is decided against).
KEY_COLUMNS = ("dedupKey", "storeTimestamp", *RETRY_LOCATION)


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


#: Marks the batch's own copies among those a retry is decided among (:func:`_copies`).
_IN_BATCH = "_inBatch"


def retry_keys(batch: DataFrame, key: Column | None = None) -> DataFrame:
    """What deciding retries needs of a batch of message rows: ``dedupKey``, ``storeTimestamp``
    and the location, for the rows that have a key. Narrow, so a caller can keep it (checkpoint)
    and decide without decoding the batch again. ``key``: a :func:`dedup_key` made before (a
    caller that plans many batches makes it once; each made costs JVM round trips)."""
    key = dedup_key() if key is None else key
    return batch.select(key.alias("dedupKey"), *KEY_COLUMNS[1:]).where(F.col("dedupKey").isNotNull())


def _copies(keys: DataFrame, earlier: DataFrame) -> DataFrame:
    """Every copy a retry is decided among: the batch's keys and the first copies before them
    (:data:`KEY_COLUMNS` and :data:`_IN_BATCH`)."""
    return (keys.withColumn(_IN_BATCH, F.lit(True))
            .unionByName(earlier.select(*KEY_COLUMNS).withColumn(_IN_BATCH, F.lit(False))))


#: Hex digits of a ``dedupKey`` its :func:`key_hash` is read from: 60 bits, an int64 either way.
HASH_DIGITS = 15


def key_hash(key: Column | None = None) -> Column:
    """A 60-bit hash of ``dedupKey`` (or of ``key``, a :func:`dedup_key`): its first
    :data:`HASH_DIGITS` hex digits as a number. Two keys that differ may share it, equal keys
    always do. What candidates for a retry are found by, here, in the driver (:func:`arrow_keys`)
    and in the first copies a sink keeps (``pipelines.io.first_copies``): a prefix of the key,
    so the driver reads it off the key it made, with no hash function of Spark's to reproduce."""
    return F.conv(F.substring(F.col("dedupKey") if key is None else key, 1, HASH_DIGITS), 16, 10).cast("bigint")


#: The columns of a source row its key is made of (:func:`dedup_key`).
KEY_PARTS = ("topic", "producerUniqueId", "uniqueId", "deliveryCount", "traceId", "bornHost", "body", "systemCopy")
#: What :func:`arrow_keys` gives.
ARROW_KEYS = pa.schema([("dedupKey", pa.string()), ("keyHash", pa.int64())])


def arrow_keys(rows: pa.RecordBatch, native: bool | None = None) -> pa.RecordBatch:
    """:func:`dedup_key` and :func:`key_hash` of every row of ``rows`` (a pyarrow batch with the
    :data:`KEY_PARTS` columns of the source schema), made in the driver: the ingest sink decides a
    micro-batch's retries from them before Spark writes it, instead of a Spark pass over the batch.

    The native core makes them (``native/src/keys.rs``); this function's own loop is the reference
    (``native=False``, or the core missing), tested equal to the core and to Spark's expressions.
    """
    from msglake.formats.native import core

    rows = rows.select(list(KEY_PARTS))
    native_core = core(native)
    if native_core is not None:
        return pa.record_batch(native_core.dedup_keys(rows)).cast(ARROW_KEYS)
    keys = [_key(*values) for values in zip(*(rows.column(n).to_pylist() for n in KEY_PARTS))]
    hashes = [None if k is None else int(k[:HASH_DIGITS], 16) for k in keys]
    return pa.record_batch([pa.array(keys, pa.string()), pa.array(hashes, pa.int64())], schema=ARROW_KEYS)


def _key(topic, producer_unique_id, unique_id, delivery_count, trace_id, born_host, body, system_copy) -> str | None:
    """One row's :func:`dedup_key`: ``concat_ws("|", ...)`` of its parts (a null part left out), hashed."""
    own = producer_unique_id if producer_unique_id is not None else unique_id
    if system_copy:
        return None
    if own is not None:
        parts = ["u", topic, own, None if delivery_count is None else str(delivery_count)]
    elif trace_id is not None:
        parts = ["t", topic, trace_id, born_host or "", None if body is None else hashlib.sha256(body).hexdigest()]
    else:
        return None
    return hashlib.sha256("|".join(p for p in parts if p is not None).encode()).hexdigest()


def in_sorted(values: np.ndarray, pieces: Iterable[np.ndarray]) -> np.ndarray:
    """Whether each of ``values`` is in one of ``pieces`` (sorted int64 arrays), as a bool mask.

    A binary search per value and piece: ``np.isin`` sorts its inputs together, and for 22,612
    candidates against 3.2M first copies' hashes (spread over all of int64) it took 3.2 s, the
    search 8 ms (a 4M-message ingest lost 4.4 s to it in its second and third batches)."""
    values = np.asarray(values, dtype=np.int64)
    found = np.zeros(len(values), dtype=bool)
    for known in pieces:
        known = np.asarray(known, dtype=np.int64)
        if len(known):
            at = np.minimum(np.searchsorted(known, values), len(known) - 1)
            found |= known[at] == values
    return found


def repeated(hashes: np.ndarray, earlier: Iterable[np.ndarray] = ()) -> np.ndarray:
    """The :func:`key_hash` values among ``hashes`` (a batch's keys') that occur more than once
    in it or in one of ``earlier`` (sorted arrays: the hashes of the first copies before the
    batch): only keys with those hashes can have a retry, usually a small part of a batch, often
    none. A superset of the repeated keys, as two keys may share a hash. Found in the driver from
    the hashes :func:`arrow_keys` made, with no Spark job."""
    distinct, counts = np.unique(np.asarray(hashes, dtype=np.int64), return_counts=True)
    return distinct[(counts > 1) | in_sorted(distinct, earlier)]


class RetryRule:
    """How a batch's retries are decided (:meth:`decide`), its column expressions made
    once: each pyspark function call is a JVM round trip or more, and a streaming sink decides
    every micro-batch (made per batch, they cost it about 200 round trips, ~0.05 s).

    A copy's first copy: the earliest first copy already in the table within the watermark of
    it, before or after it; else the earliest of the batch's copies of its key that have none.
    A copy in the table is not changed, so it stays the first even of copies stored before it.
    Another copy within the watermark of its first copy (either way) is a retry of it.

    Parameters
    ----------
    watermark_seconds : int
        How far from a first copy's store time (after it, or before a first copy already in the
        table) another copy still counts as its retry.
    """

    def __init__(self, watermark_seconds: int):
        watermark = F.make_interval(secs=F.lit(watermark_seconds))
        by_key = Window.partitionBy("dedupKey")
        mine, ts = F.col(_IN_BATCH), F.col("storeTimestamp")
        claim = F.struct(ts.alias("ts"), *[F.col(c) for c in RETRY_LOCATION])  # the least is the first
        self._mine = mine
        # The first copies of a key in the table: a few at most (one per watermark they span).
        self._stored = F.collect_list(F.when(~mine, claim)).over(by_key)  # collect_list skips nulls
        self._near = F.array_min(F.filter("_stored", lambda c: c["ts"].between(ts - watermark, ts + watermark)))
        self._first = F.coalesce(F.col("_near"), F.min(F.when(mine & F.col("_near").isNull(), claim)).over(by_key))
        first = F.col("first")
        is_self = (first["partition"] == F.col("partition")) & (first["segment"] == F.col("segment")) & (
            first["segmentPosition"] == F.col("segmentPosition")
        )
        within = ts.between(first["ts"] - watermark, first["ts"] + watermark)
        retry_of = F.when(first.isNotNull() & ~is_self & within,
                          F.struct(*[first[c].alias(c) for c in RETRY_LOCATION])).alias("retryOf")
        self._keys = [F.col(c) for c in KEY_COLUMNS]
        self._decided = [*self._keys, retry_of]
        self._located = [*[F.col(c) for c in RETRY_LOCATION], first]
        self._retry, self._first_copy = F.col("retryOf").isNotNull(), F.col("retryOf").isNull()
        self._retries = [*[F.col(c) for c in RETRY_LOCATION], F.col("retryOf")]

    def _with_first(self, copies: DataFrame) -> DataFrame:
        """The batch's rows of ``copies`` (:func:`_copies`) with their first copy, ``first``."""
        return (copies.withColumn("_stored", self._stored).withColumn("_near", self._near)
                .withColumn("first", self._first).where(self._mine))

    def decide(self, keys: DataFrame, earlier: DataFrame) -> DataFrame:
        """``keys`` (:func:`retry_keys` of a batch) with ``retryOf``: the location of the first
        copy for a retry, null for a first copy. One plan gives a caller both the batch's retries
        and its first copies.

        Parameters
        ----------
        keys : DataFrame
            The batch's rows with a key (:data:`KEY_COLUMNS`); the ingest sink gives only those
            whose key may repeat (:func:`repeated`), usually a few.
        earlier : DataFrame
            First copies already in the table (:data:`KEY_COLUMNS`), for keys that may repeat in
            the batch: those stored from the batch's first store time minus the watermark on,
            later ones included (a copy stored before one of those is its retry). They stay first
            copies.
        """
        # Each key's first copy by a window over the copies, not an aggregate joined back: one
        # partitioning of the copies, which inputs already in one partition each (a small set of
        # keys, coalesced) keep without any shuffle.
        return self._with_first(_copies(keys, earlier)).select(*self._decided)

    def retries(self, decided: DataFrame) -> DataFrame:
        """The retries of :meth:`decide`'s rows, as :func:`mark_retries` takes them."""
        return decided.where(self._retry).select(*self._retries)

    def firsts(self, decided: DataFrame) -> DataFrame:
        """The first copies of :meth:`decide`'s rows, as :func:`retry_keys` gives them."""
        return decided.where(self._first_copy).select(*self._keys)


def find_retries(keys: DataFrame, earlier: DataFrame, watermark_seconds: int) -> DataFrame:
    """The retries among ``keys``: their location and ``retryOf`` (parameters: :meth:`RetryRule.decide`)."""
    rule = RetryRule(watermark_seconds)
    return rule.retries(rule.decide(keys, earlier))


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
