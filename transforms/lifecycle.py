"""The life of every message copy up to an evaluation time ``T`` (docs/semantics.md §3-7).

Input: message rows in the unified schema, topic policies, ``T`` and, optionally, what
consumers did (consumer events, consumer-offset snapshots). Output: every copy of every
message with its state at ``T``, the dead-lettered copies with their x-death history, and
the log of state changes. Nothing reads the clock: the same input and ``T`` give the same
rows.

How it works. Each copy (a message as published is hop 0; its dead-lettered copy in the
target topic is hop 1, and so on) leaves its topic at the earliest of its *fates*:
consumed, rejected, delivery limit, overflow (``maxlen``), expiry, or, for RocketMQ, the
next record of the same message in a ``%RETRY%``/``%DLQ%`` topic. A fate after ``T`` has not
happened yet. A death that routes to a dead-letter topic makes a new copy, stored there at
the time of the death, which can die again (its own TTL, overflow, rejection...). Copies
arriving in a topic change that topic's overflow, so the fates are recomputed, with the
copies known so far, until the set of copies stops changing (at most ``max_hops + 1``
rounds; a copy beyond ``max_hops`` is dropped with reason ``hop_limit``).

Everything is Spark built-ins except the overflow of topics with ``maxLength`` or
``maxLengthBytes``: a bounded queue is a sequential process (who is dropped depends on who
was dropped before), simulated per topic partition over Arrow arrays (:func:`overflow_deaths`).

This module is the rule set alone, pure functions of DataFrames: the rounds (evaluate,
derive the copies, evaluate again until nothing changes) are run by
``msglake.pipelines.jobs.evaluate`` for ``msglake replay`` and, over the copies still pending,
for each micro-batch of ``msglake semantics``.

Simplifications, documented in the README: a copy enters its topic's backlog when stored
(also while scheduled); a dead-lettered copy goes to partition 0 of the target topic
(RocketMQ's DLQ has one queue; an AMQP queue has none); RocketMQ records of one message are
linked in store-time order whatever the consumer group; per-message expiry at the head only
(``expiryAtHeadOnly``) waits for older messages' departures other than overflow.
"""
from __future__ import annotations

import heapq
from collections import deque
from functools import reduce

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window, functions as F

from msglake.transforms.semantics import (
    Policies,
    plus_ms,
    deliver_at,
    effective_priority,
    message_type,
    own_expire_at,
    policy_for,
    policy_value,
)

#: Default bound on dead-letter hops of one message (a TTL loop is ended by the cycle rule; a
#: rejection loop is legitimate and would otherwise never end).
DEFAULT_MAX_HOPS = 16
NEVER = np.iinfo(np.int64).max
RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"

#: Order of fates at the same instant (lower wins): a stored next record is fact; a consumer's
#: verdict comes before the broker's limits; expiry beats a consumption at the same instant
#: (a message consumed *before* its expiry does not expire).
_RANK = {"lineage": 0, "rejected": 1, "delivery_limit": 2, "maxlen": 3, "expired": 4, "consumed": 5}

#: Columns of a copy while the engine works on it.
ROW = (
    "rowId", "uniqueId", "parentRowId", "hop", "topic", "partition", "sourceFormat", "segment", "segmentPosition",
    "queueOffset", "storeTimestamp", "deliverAt", "ownExpireAt", "expiration", "bodySize", "deliveryCount",
    "effectivePriority", "messageType", "exchange", "routingKey", "cc", "deathHistory", "firstDeathQueue",
    "firstDeathReason", "firstDeathExchange", "offsetConsumedAt", "nextRowId", "nextTopic", "nextStore", "stored",
)




def _t(as_of) -> Column:
    return F.lit(as_of).cast("timestamp")


def _micros(c: Column) -> Column:
    return F.coalesce(F.unix_micros(c), F.lit(int(NEVER)))


def death_entry(queue: Column, reason: Column, time: Column, exchange: Column, routing_keys: Column,
                original_expiration: Column) -> Column:
    """One x-death entry (msglake.schemas.messages.DEATH) with count 1."""
    return F.struct(
        queue.alias("queue"), reason.alias("reason"), F.lit(1).cast("bigint").alias("count"),
        time.alias("time"), exchange.alias("exchange"), routing_keys.alias("routingKeys"),
        original_expiration.alias("originalExpiration"),
    )


def record_death(history: Column, entry: Column) -> Column:
    """``history`` after one more death (semantics.md §5).

    A death whose (queue, reason) is already in the history increments that entry's count and
    moves it to the front, keeping its first time; a new one goes in front with count 1.
    Entry 0 is always the latest death.
    """
    same = lambda e: (e["queue"] == entry["queue"]) & (e["reason"] == entry["reason"])  # noqa: E731
    earlier = F.filter(history, same)
    others = F.filter(history, lambda e: ~same(e))
    bumped = F.transform(earlier, lambda e: e.withField("count", e["count"] + 1))
    return F.when(F.size(earlier) > 0, F.concat(bumped, others)).otherwise(F.concat(F.array(entry), history))



def conform(messages: DataFrame) -> DataFrame:
    """Messages with the optional columns the engine reads (absent in hand-written JSON input)."""
    optional = {
        "uniqueId": "string", "systemCopy": "boolean", "retryOf": "struct<partition:int,segment:string,"
        "segmentPosition:bigint>", "queueOffset": "bigint", "bornTimestamp": "timestamp", "delayTime": "bigint",
        "startDeliverTime": "timestamp", "expireTime": "timestamp", "messageType": "string",
        "transactionId": "string", "messageKey": "string", "deliveryCount": "int", "priority": "int",
        "properties": "map<string,string>", "headers": "map<string,string>", "bodySize": "int",
        "sourceFormat": "string", "segment": "string", "segmentPosition": "bigint", "partition": "int",
        "producerUniqueId": "string",
    }
    # One withColumns per step, not a withColumn per column: pyspark analyses the whole plan
    # again for each call, and the rounds conform and fate small frames many times.
    missing = {name: F.lit(None).cast(kind) for name, kind in optional.items() if name not in messages.columns}
    if missing:
        messages = messages.withColumns(missing)
    empty = F.create_map().cast("map<string,string>")
    return messages.withColumns({
        "properties": F.coalesce("properties", empty), "headers": F.coalesce("headers", empty),
        "deliveryCount": F.coalesce("deliveryCount", F.lit(0)), "priority": F.coalesce("priority", F.lit(5)),
        "partition": F.coalesce("partition", F.lit(0)), "bodySize": F.coalesce("bodySize", F.lit(0)),
    })


def is_lineage_topic(topic: Column) -> Column:
    return topic.startswith(RETRY_PREFIX) | topic.startswith(DLQ_PREFIX)


def is_lineage_name(topic: str) -> bool:
    """:func:`is_lineage_topic` of a topic name the driver holds."""
    return topic.startswith((RETRY_PREFIX, DLQ_PREFIX))


#: The property of a RocketMQ ``%RETRY%``/``%DLQ%`` record naming the record it retries (its offset msgId).
ORIGIN_ID = "ORIGIN_MESSAGE_ID"


def own_id() -> Column:
    """A message row's own id: its RocketMQ UNIQ_KEY (a batch member's first, not the batch's
    shared one that ``uniqueId`` reports), else ``uniqueId``, else ``messageId``."""
    return F.coalesce("producerUniqueId", "uniqueId", "messageId")


def message_keys(messages: DataFrame, origins: DataFrame | None = None) -> DataFrame:
    """Messages (after :func:`conform`) with ``_key``: the engine's id of the message across copies.

    A row's own id (:func:`own_id`), except for a RocketMQ ``%RETRY%``/``%DLQ%`` record that
    names its origin (``ORIGIN_MESSAGE_ID``, the offset msgId of the first record): the
    origin's key. The broker rebuilds a retried record's properties from a map, so a batch
    member's retry carries only the batch's UNIQ_KEY; its origin is what says whose it is.
    ``origins``: where to look origins up (default: ``messages`` itself).
    """
    m = messages.withColumn("_key", own_id())
    origin = F.col("properties")[ORIGIN_ID]
    named = is_lineage_topic(F.col("topic")) & origin.isNotNull()
    retries = m.where(named).withColumn("_origin", origin)
    source = m if origins is None else conform(origins).withColumn("_key", own_id())
    found = (
        source.select(F.col("messageId").alias("_origin"), F.col("_key").alias("_originKey"))
        .join(retries.select("_origin").distinct(), "_origin", "left_semi")
        .groupBy("_origin").agg(F.min("_originKey").alias("_originKey"))
    )
    resolved = (retries.join(found, "_origin", "left").withColumn("_key", F.coalesce("_originKey", "_key"))
                .drop("_origin", "_originKey"))
    return m.where(~named).unionByName(resolved)


def stored_copies(messages: DataFrame, policies: Policies, origins: DataFrame | None = None) -> DataFrame:
    """Hop-0 copies of stored messages (any store time), less broker-internal copies and producer retries.

    ``origins``: the messages a retry record's origin may be among (:func:`message_keys`).
    """
    m = conform(messages).where(is_own_copy())
    return message_keys(m, origins).select(*copy_columns(policies))


def is_own_copy() -> Column:
    """Whether a (conformed) stored record is a message's own copy: no broker-internal copy, no producer retry."""
    return ~F.coalesce(F.col("systemCopy"), F.lit(False)) & F.col("retryOf").isNull()


def link(rows: DataFrame) -> DataFrame:
    """Copies with ``nextRowId``/``nextTopic``/``nextStore``: the record of the same message that followed.

    RocketMQ records of one message (same uniqueId, one of them in a ``%RETRY%``/``%DLQ%``
    topic) are chained in store-time order. Only messages with such a record have a chain:
    the window covers those alone.
    """
    rows = rows.drop("nextRowId", "nextTopic", "nextStore")
    chain_ids = rows.where(is_lineage_topic(F.col("topic"))).select("uniqueId").distinct()
    order = Window.partitionBy("uniqueId").orderBy("storeTimestamp", "rowId")
    linked = (
        rows.join(chain_ids, "uniqueId", "left_semi")
        .withColumns({"nextRowId": F.lead("rowId").over(order), "nextTopic": F.lead("topic").over(order),
                      "nextStore": F.lead("storeTimestamp").over(order)})
    )
    alone = rows.join(chain_ids, "uniqueId", "left_anti").select(
        "*", *[F.lit(None).cast(k).alias(c) for c, k in (("nextRowId", "string"), ("nextTopic", "string"),
                                                         ("nextStore", "timestamp"))])
    return alone.unionByName(linked)


def base_rows(messages: DataFrame, policies: Policies, as_of) -> DataFrame:
    """Hop-0 copies of the messages stored by ``as_of``, linked (:func:`link`)."""
    return link(stored_copies(messages, policies).where(F.col("storeTimestamp") <= _t(as_of)))


def topic_arrivals(messages: DataFrame) -> DataFrame:
    """``topic, since``: when each topic got its first stored message (a dead-letter target exists from then)."""
    return messages.groupBy("topic").agg(F.min("storeTimestamp").alias("since"))


def row_id() -> Column:
    """A stored record's copy id: a hash of its location (the identity of semantics.md §6) and id."""
    return F.sha2(F.concat_ws("|", "sourceFormat", "topic", F.col("partition").cast("string"), "segment",
                              F.col("segmentPosition").cast("string"), F.col("messageId")), 256)



def copy_columns(policies: Policies) -> list[Column]:
    """A hop-0 copy's columns from a message row (unified schema, after :func:`conform` and :func:`message_keys`)."""
    cc = F.col("properties")["CC"]
    return [
        row_id().alias("rowId"),
        F.col("_key").alias("uniqueId"),
        F.lit(None).cast("string").alias("parentRowId"),
        F.lit(0).alias("hop"),
        "topic", "partition", "sourceFormat", "segment", "segmentPosition", "queueOffset", "storeTimestamp",
        deliver_at().alias("deliverAt"),
        own_expire_at().alias("ownExpireAt"),
        F.col("properties")["expiration"].alias("expiration"),
        "bodySize", "deliveryCount",
        effective_priority(policies).alias("effectivePriority"),
        message_type().alias("messageType"),
        F.col("properties")["exchange"].alias("exchange"),
        F.coalesce(F.col("properties")["routingKey"], F.col("topic")).alias("routingKey"),
        F.when(cc.isNotNull() & (cc != ""), F.split(cc, ",")).otherwise(F.array().cast("array<string>")).alias("cc"),
        F.array().cast(HISTORY_TYPE).alias("deathHistory"),
        *[F.lit(None).cast("string").alias(c) for c in ("firstDeathQueue", "firstDeathReason", "firstDeathExchange")],
        #: A record the broker stored (as opposed to a copy the engine derives).
        F.lit(True).alias("stored"),
    ]


#: ``deathHistory`` as a Spark type string (msglake.schemas.messages.DEATH).
HISTORY_TYPE = ("array<struct<queue:string,reason:string,count:bigint,time:timestamp,exchange:string,"
                "routingKeys:array<string>,originalExpiration:string>>")


def offset_consumption(rows: DataFrame, offsets: DataFrame | None, as_of) -> DataFrame:
    """Add ``offsetConsumedAt``: the first consumer-offset snapshot (by ``as_of``) past the row's queue offset.

    A group's committed offset is the next one it will consume, so a snapshot with
    ``offset > queueOffset`` shows the message consumed by then (any group). One window over
    rows and snapshots sorted by offset, per topic and queue: no range join.
    """
    if offsets is None:
        return rows.withColumn("offsetConsumedAt", F.lit(None).cast("timestamp"))
    snaps = (
        offsets.where(F.col("snapshotTime") <= _t(as_of))
        .select("topic", F.col("queue").cast("int").alias("partition"), (F.col("offset") - 1).alias("k"),
                F.col("snapshotTime").alias("snap"), F.lit(None).cast("string").alias("rid"), F.lit(0).alias("o"))
    )
    keyed = rows.where(F.col("queueOffset").isNotNull()).select(
        "topic", "partition", F.col("queueOffset").alias("k"), F.lit(None).cast("timestamp").alias("snap"),
        F.col("rowId").alias("rid"), F.lit(1).alias("o"))
    # Descending by offset, snapshots before rows at the same key: the running minimum of the
    # snapshot times seen so far covers every snapshot with offset - 1 >= queueOffset.
    w = Window.partitionBy("topic", "partition").orderBy(F.col("k").desc(), "o").rowsBetween(
        Window.unboundedPreceding, 0)
    found = (
        snaps.unionByName(keyed).withColumn("at", F.min("snap").over(w))
        .where(F.col("o") == 1).select(F.col("rid").alias("rowId"), F.col("at").alias("offsetConsumedAt"))
    )
    return rows.join(found, "rowId", "left")


def conform_events(events: DataFrame) -> DataFrame:
    """Consumer events with the optional columns the engine reads (absent in hand-made input)."""
    for name, kind in (("partition", "int"), ("uniqueId", "string")):
        if name not in events.columns:
            events = events.withColumn(name, F.lit(None).cast(kind))
    return events


def resolve_events(events: DataFrame, messages: DataFrame) -> DataFrame:
    """Consumer events with ``uniqueId``, the message each names, and ``matches``: every stored
    message its topic, id and partition (when given) fit, as ``{uniqueId, partition}``.

    An event names a message by any id a consumer sees: the engine's key, the broker's
    ``uniqueId``, its own UNIQ_KEY or its ``messageId`` (RocketMQ offset msgId, NSQ id). One
    match: ``uniqueId`` is that message's key. None: null (a dead-letter copy's topic, or a
    message not in ``messages``). More than one (an NSQ id in several partitions, a batch
    send's shared UNIQ_KEY): null, and the caller refuses the event rather than guess.
    """
    keyed = message_keys(conform(messages).where(~F.coalesce(F.col("systemCopy"), F.lit(False))))
    ids = F.array_distinct(F.filter(F.array("_key", "uniqueId", "producerUniqueId", "messageId"),
                                    lambda v: v.isNotNull()))
    aliases = keyed.select("topic", F.col("partition").alias("_p"), "_key", F.explode(ids).alias("_alias"))
    ev = conform_events(events).drop("uniqueId").withColumn("_event", F.monotonically_increasing_id())
    fits = (F.col("e.topic") == F.col("a.topic")) & (F.col("e.messageId") == F.col("a._alias")) & (
        F.col("e.partition").isNull() | (F.col("e.partition") == F.col("a._p")))
    found = (
        ev.alias("e").join(aliases.alias("a"), fits, "inner")
        .groupBy(F.col("e._event").alias("_event"))
        .agg(F.array_sort(F.collect_set(F.struct(F.col("a._key").alias("uniqueId"),
                                                 F.col("a._p").alias("partition")))).alias("matches"))
    )
    return (
        ev.join(found, "_event", "left")
        .withColumn("matches", F.coalesce("matches", F.array().cast("array<struct<uniqueId:string,partition:int>>")))
        .withColumn("uniqueId", F.when(F.size("matches") == 1, F.col("matches")[0]["uniqueId"]))
        .drop("_event")
    )


def event_key() -> Column:
    """The message a consumer event names: its resolved ``uniqueId``, else the id as given."""
    return F.coalesce("uniqueId", "messageId")


def events_by_message(events: DataFrame | None, as_of) -> DataFrame | None:
    """Consumer events by ``as_of``, one row per (topic, uniqueId) with its events in time order."""
    if events is None:
        return None
    return (
        conform_events(events).where(F.col("time") <= _t(as_of))
        .groupBy("topic", event_key().alias("uniqueId"))
        .agg(F.array_sort(F.collect_list(F.struct("time", "event", "partition"))).alias("consumerEvents"))
    )


def consumer_verdicts(rows: DataFrame, by_message: DataFrame | None) -> DataFrame:
    """Add ``ackedAt``, ``rejectedAt`` and ``requeues`` (sorted times) from :func:`events_by_message`.

    Events name a message by topic and id (and partition, when given); every copy in that
    topic has them, so an event belongs to the copy that was there: a message as published
    takes events from its store time on, a dead-lettered copy those after its arrival (the
    event at that instant is the one that ended the copy before it).
    """
    if by_message is None:
        return rows.select("*", F.lit(None).cast("timestamp").alias("ackedAt"),
                           F.lit(None).cast("timestamp").alias("rejectedAt"),
                           F.lit(None).cast("array<timestamp>").alias("requeues"))
    store = F.col("storeTimestamp")
    mine = F.filter("consumerEvents", lambda e: ((e["time"] > store) | ((F.col("hop") == 0) & (e["time"] == store)))
                    & (e["partition"].isNull() | (e["partition"] == F.col("partition"))))
    times = lambda kind: F.transform(F.filter(mine, lambda e: e["event"] == kind), lambda e: e["time"])  # noqa: E731
    return (
        rows.join(by_message, ["topic", "uniqueId"], "left")
        .withColumns({"ackedAt": F.array_min(times("acked")), "rejectedAt": F.array_min(times("rejected")),
                      "requeues": times("requeued")})
        .drop("consumerEvents")
    )


def overflow_deaths(store: np.ndarray, size: np.ndarray, leave: np.ndarray, max_length: int | None,
                    max_bytes: int | None, reject: bool) -> np.ndarray:
    """When each message of one partition dies by overflow (``maxlen``), or -1 (semantics.md §5).

    Arrays are in arrival order: store time and departure time (``NEVER`` if none) in
    microseconds, body size in bytes. ``drop-head``: after each arrival, the oldest messages
    beyond the limits die at that instant. ``reject-publish(-dlx)``: an arrival that would pass
    a limit dies on arrival. A message leaves the backlog at its departure time.
    """
    limit = NEVER if max_length is None else max_length
    limit_bytes = NEVER if max_bytes is None else max_bytes
    n = len(store)
    # Python lists, not arrays: the loop reads and writes one element at a time, and a NumPy
    # element access costs several times a list's (20-40 % of the loop).
    death = [-1] * n
    alive = [False] * n
    store, size, leave = store.tolist(), size.tolist(), leave.tolist()
    queue: deque[int] = deque()
    departures: list[tuple[int, int]] = []
    count = nbytes = 0
    for i in range(n):
        now = store[i]
        while departures and departures[0][0] <= now:
            _, j = heapq.heappop(departures)
            if alive[j]:
                alive[j] = False
                count -= 1
                nbytes -= size[j]
        if reject and (count + 1 > limit or nbytes + size[i] > limit_bytes):
            death[i] = now
            continue
        alive[i] = True
        count += 1
        nbytes += size[i]
        queue.append(i)
        if leave[i] != NEVER:
            heapq.heappush(departures, (leave[i], i))
        while count > limit or nbytes > limit_bytes:
            j = queue.popleft()
            if alive[j]:
                alive[j] = False
                count -= 1
                nbytes -= size[j]
                death[j] = now
    return np.array(death, dtype=np.int64)


def _overflow_group(table: pa.Table) -> pa.Table:
    order = table.sort_by([("store", "ascending"), ("offset", "ascending"), ("rowId", "ascending")])
    first = order.slice(0, 1).to_pylist()[0]
    death = overflow_deaths(
        order["store"].to_numpy(), order["bodySize"].to_numpy(zero_copy_only=False),
        order["leave"].to_numpy(), first["maxLength"], first["maxLengthBytes"], first["overflow"] != "drop-head",
    )
    keep = death >= 0
    return pa.table({"rowId": order["rowId"].filter(pa.array(keep)), "maxlenMicros": pa.array(death[keep])})


def _maxlen(rows: DataFrame, policies: Policies, leave: Column) -> DataFrame:
    """``maxlenAt`` for rows of topics with a length limit (null elsewhere)."""
    limited = [p for p, pol in policies.items() if pol.get("maxLength") is not None
               or pol.get("maxLengthBytes") is not None]
    if not limited:
        return rows.withColumn("maxlenAt", F.lit(None).cast("timestamp"))
    cand = rows.select(
        "rowId", "topic", "partition", F.unix_micros("storeTimestamp").alias("store"),
        F.coalesce("queueOffset", F.lit(-1)).alias("offset"), F.coalesce("bodySize", F.lit(0)).alias("bodySize"),
        _micros(leave).alias("leave"),
        policy_value(policies, "maxLength").cast("bigint").alias("maxLength"),
        policy_value(policies, "maxLengthBytes").cast("bigint").alias("maxLengthBytes"),
        policy_value(policies, "overflow", "drop-head").alias("overflow"),
    ).where(F.col("maxLength").isNotNull() | F.col("maxLengthBytes").isNotNull())
    deaths = cand.groupBy("topic", "partition").applyInArrow(_overflow_group, "rowId string, maxlenMicros bigint")
    return rows.join(deaths, "rowId", "left").withColumn("maxlenAt", F.timestamp_micros("maxlenMicros")).drop(
        "maxlenMicros")


def _fate(rank: str, time: Column, reason: str | Column) -> Column:
    reason = F.lit(reason) if isinstance(reason, str) else reason
    return F.when(time.isNotNull(), F.struct(time.alias("time"), F.lit(_RANK[rank]).alias("rank"),
                                             reason.alias("reason")))


def _coupled_departures(rows: DataFrame, policies: Policies, other: Column) -> DataFrame:
    """``expireAt`` and ``maxlenAt`` of copies in coupled topics (all of a partition's copies at once).

    Per-message expiry at the head only (semantics.md §4) takes effect once every older message
    has left. With a = the copy's ``other`` departure and b = its own expiry, the departure is
    min(a, max(b, H)) with H the latest departure of the older ones; H reduces to the running
    maximum of min(a, b) over the older copies (so a window, not a sequential scan). The copies
    of topics with a length limit go through the overflow simulation (:func:`_maxlen`). Each
    topic's copies take only the steps its policy needs: each step reads all the copies of a
    partition, so a step a topic does not need would shuffle its copies for nothing.
    """
    head_only = policy_value(policies, "expiryAtHeadOnly", False)
    limited = policy_value(policies, "maxLength").isNotNull() | policy_value(policies, "maxLengthBytes").isNotNull()
    parts = []
    for head, limit in ((False, True), (True, False), (True, True)):
        if (head, limit) not in {_coupling(p) for p in policies.values()}:
            continue
        part = rows.where((head_only if head else ~head_only) & (limited if limit else ~limited))
        own = F.col("ownExpireAt")
        if head:
            order = Window.partitionBy("topic", "partition").orderBy("storeTimestamp", "queueOffset", "rowId")
            first = F.max(_micros(F.least(other, own))).over(order.rowsBetween(Window.unboundedPreceding, -1))
            own = (F.when(own.isNull() | first.isNull(), own).when(first == int(NEVER), F.lit(None))
                   .otherwise(F.greatest(own, F.timestamp_micros(first))))
        part = part.withColumn("expireAt", F.least("ttlAt", own))
        if limit:
            part = _maxlen(part, policies, F.least(other, F.col("expireAt")))
        else:
            part = part.withColumn("maxlenAt", F.lit(None).cast("timestamp"))
        parts.append(part)
    return reduce(lambda a, b: a.unionByName(b), parts)


def fates(rows: DataFrame, policies: Policies, as_of, events: DataFrame | None, topics: DataFrame,
          max_hops: int) -> DataFrame:
    """Each copy's fate, state at ``as_of`` and, for a death routed on, its copy's new history.

    ``events``: :func:`events_by_message`. ``topics``: :func:`topic_arrivals`; a dead-letter
    target exists from its first stored message on, or always when a policy names it exactly.
    ``dueAt`` is when a copy still live at ``as_of`` next changes state as far as its inputs
    tell (its release, or its fate): null when only new input (a consumer, an arrival) can.
    """
    t = _t(as_of)
    store = F.col("storeTimestamp")
    ttl = policy_value(policies, "messageTtlMs")
    max_deliveries = policy_value(policies, "maxDeliveries")
    # A limit of N allows N+1 deliveries: the copy dies when a failed delivery takes it past N.
    nth_requeue = max_deliveries - F.col("deliveryCount") + 1
    limit_at = F.when(F.col("deliveryCount") > max_deliveries, store).when(
        F.size("requeues") >= nth_requeue, F.element_at("requeues", nth_requeue.cast("int")))
    consumed_at = F.least("ackedAt", "offsetConsumedAt")
    ttl_at = F.when(ttl.isNotNull(), plus_ms(store, ttl))
    other = F.least("consumedAt", "rejectedAt", "limitAt", "nextStore", "ttlAt")

    def departures(part: DataFrame) -> DataFrame:
        part = consumer_verdicts(part, events)
        return part.select("*", consumed_at.alias("consumedAt"), limit_at.alias("limitAt"), ttl_at.alias("ttlAt"))

    def own_departures(part: DataFrame) -> DataFrame:
        return departures(part).select("*", F.least("ttlAt", "ownExpireAt").alias("expireAt"),
                                       F.lit(None).cast("timestamp").alias("maxlenAt"))

    # Only the copies of coupled topics (overflow limits, expiry at the head only) need the others
    # of their partition: the window and the overflow simulation shuffle those alone, and every
    # other copy's fate is its own row's (the replay's first round over 1M messages with three
    # coupled topics of seven: 14.4-18.8 s -> 9.5-16.2 s).
    if any_coupled(policies):
        rows = own_departures(rows.where(~coupled(policies))).unionByName(
            _coupled_departures(departures(rows.where(coupled(policies))), policies, other))
    else:
        rows = own_departures(rows)

    next_dlq = F.col("nextTopic").startswith(DLQ_PREFIX)
    fate = F.least(
        _fate("lineage", F.col("nextStore"), F.when(next_dlq, "delivery_limit").otherwise("rejected")),
        _fate("rejected", F.col("rejectedAt"), "rejected"),
        _fate("delivery_limit", F.col("limitAt"), "delivery_limit"),
        _fate("maxlen", F.col("maxlenAt"), "maxlen"),
        _fate("expired", F.col("expireAt"), "expired"),
        _fate("consumed", F.col("consumedAt"), "consumed"),
    )
    rows = rows.withColumns({"fate": F.when(fate["time"] <= t, fate),
                             "dueAt": F.least(F.when(F.col("deliverAt") > t, F.col("deliverAt")), fate["time"])})

    reason = F.col("fate")["reason"]
    lineage = F.col("fate")["rank"] == _RANK["lineage"]
    target = F.when(lineage, F.col("nextTopic")).otherwise(policy_value(policies, "deadLetterTopic"))
    # x-death: for a RocketMQ retry the death is recorded against the retry topic (its count is
    # then RECONSUMETIMES); everything else against the queue the copy died in.
    queue = F.when(lineage & (reason == "rejected"), F.col("nextTopic")).otherwise(F.col("topic"))
    entry = death_entry(queue, reason, F.col("fate")["time"], F.col("exchange"),
                        F.concat(F.array("routingKey"), F.col("cc")), F.col("expiration"))
    # Only a copy that dies needs its new history (higher-order functions are not compiled).
    history = F.when(F.col("fate").isNotNull() & (reason != "consumed"), record_death(F.col("deathHistory"), entry))
    in_history = F.exists("newHistory", lambda e: e["queue"] == F.col("target"))
    rejected_before = F.exists("newHistory", lambda e: e["reason"] == "rejected")
    overflow_mode = policy_value(policies, "overflow", "drop-head")
    terminal = (
        F.when(F.col("fate").isNull() | (reason == "consumed"), F.lit(None))
        .when(lineage, F.lit("dead_lettered"))
        .when((reason == "maxlen") & (overflow_mode == "reject-publish"), F.lit("dropped"))
        .when(F.col("target").isNull() & (reason == "expired"), F.lit("expired"))
        .when(F.col("target").isNull(), F.lit("dropped"))
        .when(~F.col("targetExists"), F.lit("dropped:missing_target"))
        .when(reason.isin("expired", "maxlen") & in_history & ~rejected_before, F.lit("dropped:cycle"))
        .when(F.col("hop") >= max_hops, F.lit("dropped:hop_limit"))
        .otherwise(F.lit("dead_lettered"))
    )
    declared = [p for p in policies if not any(c in p for c in "*?[")]
    arrived = F.broadcast(topics.select(F.col("topic").alias("target"), F.col("since").alias("targetSince")))
    rows = (rows.withColumn("target", target).join(arrived, "target", "left")
            .withColumn("targetExists", F.col("target").isin(declared)
                        | F.coalesce(F.col("targetSince") <= F.col("fate")["time"], F.lit(False)))
            .drop("targetSince")
            .withColumn("newHistory", history).withColumn("terminal", terminal))
    live_state = F.when(F.col("deliverAt") > t, F.lit("scheduled")).otherwise(F.lit("ready"))
    return (
        rows.withColumns({
            "state": F.coalesce(F.get(F.split("terminal", ":"), 0), live_state),
            "stateReason": F.when(F.col("terminal").isNotNull(),
                                  F.coalesce(F.get(F.split("terminal", ":"), 1), reason)),
            "stateTime": F.when(F.col("terminal").isNotNull(), F.col("fate")["time"])
            .when(F.col("deliverAt") > t, store).otherwise(F.greatest(store, F.col("deliverAt"))),
        })
        # after "state", which it reads; "consumedAt" replaced in place, as before
        .withColumns({"deadLetterTopic": F.when(F.col("state") == "dead_lettered", F.col("target")),
                      "consumedAt": F.when(reason == "consumed", F.col("consumedAt"))})
    )


def dead_letter_copies(fated: DataFrame, base: DataFrame, policies: Policies) -> DataFrame:
    """The copies the deaths at this round make: new rows in the target topics, and the next
    RocketMQ record of a message with the history it inherits."""
    dead = fated.where(F.col("state") == "dead_lettered")
    lineage = F.col("fate")["rank"] == _RANK["lineage"]
    first = {
        "firstDeathQueue": F.coalesce("firstDeathQueue", F.col("newHistory")[F.size("newHistory") - 1]["queue"]),
        "firstDeathReason": F.coalesce("firstDeathReason", F.col("fate")["reason"]),
        "firstDeathExchange": F.coalesce("firstDeathExchange", F.col("exchange")),
    }
    routing_key = policy_value(policies, "deadLetterRoutingKey")
    exchange = F.coalesce(policy_value(policies, "deadLetterExchange"), F.col("target"))
    made = dead.where(~lineage).select(
        F.sha2(F.concat_ws(">", "rowId", "target"), 256).alias("rowId"), "uniqueId",
        F.col("rowId").alias("parentRowId"), (F.col("hop") + 1).alias("hop"), F.col("target").alias("topic"),
        F.lit(0).alias("partition"),
        *[F.lit(None).cast(k).alias(c) for c, k in (("sourceFormat", "string"), ("segment", "string"),
                                                    ("segmentPosition", "bigint"), ("queueOffset", "bigint"))],
        F.col("fate")["time"].alias("storeTimestamp"), F.col("fate")["time"].alias("deliverAt"),
        F.lit(None).cast("timestamp").alias("ownExpireAt"), F.lit(None).cast("string").alias("expiration"),
        "bodySize", F.lit(0).alias("deliveryCount"), "effectivePriority", "messageType",
        exchange.alias("exchange"),
        F.coalesce(routing_key, F.col("routingKey")).alias("routingKey"),
        F.when(routing_key.isNotNull(), F.array().cast("array<string>")).otherwise(F.col("cc")).alias("cc"),
        F.col("newHistory").alias("deathHistory"),
        *[v.alias(k) for k, v in first.items()],
        F.lit(None).cast("timestamp").alias("offsetConsumedAt"),
        *[F.lit(None).cast(k).alias(c) for c, k in (("nextRowId", "string"), ("nextTopic", "string"),
                                                    ("nextStore", "timestamp"))],
        F.lit(False).alias("stored"),
    )
    inherited = dead.where(lineage).select(
        F.col("nextRowId").alias("rowId"), F.col("rowId").alias("_parent"), F.col("newHistory").alias("h"),
        *[v.alias("_" + k) for k, v in first.items()], (F.col("hop") + 1).alias("_hop"),
    )
    relinked = base.join(F.broadcast(inherited), "rowId").select(
        *[F.col(c) for c in ROW if c not in ("parentRowId", "hop", "deathHistory", *first)],
        F.col("_parent").alias("parentRowId"), F.col("_hop").alias("hop"), F.col("h").alias("deathHistory"),
        *[F.col("_" + k).alias(k) for k in first],
    )
    return made.select(*ROW).unionByName(relinked.select(*ROW))


def version() -> Column:
    """What a copy's fate depends on besides its topic's other copies: changes make it a new version.

    The history is hashed as it is (xxhash64 takes arrays and structs), not as JSON text: writing
    the JSON cost more than the rest of a round's copies (442K dead-letter copies: 0.8-1.1 s ->
    0.3-0.45 s)."""
    return F.xxhash64("rowId", "hop", "parentRowId", "storeTimestamp", "deathHistory", "firstDeathQueue",
                      "firstDeathReason", "firstDeathExchange")


def coupled(policies: Policies) -> Column:
    """True for copies in topics where one copy's fate depends on the others in its partition
    (overflow limits, per-message expiry at the head only)."""
    return (policy_value(policies, "maxLength").isNotNull() | policy_value(policies, "maxLengthBytes").isNotNull()
            | policy_value(policies, "expiryAtHeadOnly", False))


def _coupling(policy: dict) -> tuple[bool, bool]:
    """(expiry at the head only, a length limit) of one policy: :func:`coupled`'s fields, in Python."""
    return (bool(policy.get("expiryAtHeadOnly")),
            policy.get("maxLength") is not None or policy.get("maxLengthBytes") is not None)


def any_coupled(policies: Policies) -> bool:
    """Whether any policy couples its topic's copies (:func:`coupled`)."""
    return any(any(_coupling(p)) for p in policies.values())


def is_coupled_topic(policies: Policies, topic: str) -> bool:
    """:func:`coupled` for one topic, in Python (the same fields of the same policy)."""
    return any(_coupling(policy_for(policies, topic)))


#: ``message_states`` columns of a fated copy (besides ``asOf``).
STATE_COLUMNS = (
    "rowId", "uniqueId", "parentRowId", "hop", "topic", "partition", "sourceFormat", "segment", "segmentPosition",
    "queueOffset", "storeTimestamp", "deliverAt", "expireAt", "effectivePriority", "messageType", "bodySize", "state",
    "stateReason", "stateTime", "consumedAt", "deadLetterTopic", "exchange", "routingKey", "cc", "deathHistory",
    "firstDeathQueue", "firstDeathReason", "firstDeathExchange",
)


def copy_states(fated: DataFrame, as_of) -> DataFrame:
    """Fated copies as ``message_states`` rows at ``as_of``."""
    return fated.select(_t(as_of).alias("asOf"), *[F.col(c).cast("int").alias(c) if c == "hop" else c
                                                   for c in STATE_COLUMNS])


def state_events(fated: DataFrame, as_of) -> DataFrame:
    """State changes of each copy up to ``as_of``; the last one at or before ``t`` gives its state at ``t``."""
    t = _t(as_of)
    store, deliver = F.col("storeTimestamp"), F.col("deliverAt")
    delayed = deliver > store
    terminal = F.col("state").isin("expired", "dead_lettered", "dropped")
    fate_time = F.col("fate")["time"]
    first_state = F.when(delayed, F.lit("scheduled")).otherwise(F.lit("ready"))
    none = F.lit(None).cast("string")
    # (event, time, state after it, reason, whether the copy had it by T), in log order.
    candidates = [
        ("stored", store, first_state, none, store <= t),
        ("scheduled", store, F.lit("scheduled"), none, delayed & (store <= t)),
        ("ready", F.greatest(store, deliver), F.lit("ready"), none,
         (~terminal | (deliver <= fate_time)) & (F.greatest(store, deliver) <= t)),
        ("consumed", F.col("consumedAt"), F.lit("ready"), none, F.coalesce(F.col("consumedAt") <= t, F.lit(False))),
        (F.col("state"), F.col("stateTime"), F.col("state"), F.col("stateReason"), terminal),
    ]
    entries, seq = [], F.lit(0)
    for name, time, state, reason, had in candidates:
        had = F.coalesce(had, F.lit(False))
        entries.append(F.when(had, F.struct(F.lit(name).alias("event"), time.alias("time"), seq.alias("seq"),
                                            state.alias("state"), reason.alias("reason"))))
        seq = seq + had.cast("int")
    return (
        fated.select(_t(as_of).alias("asOf"), "rowId", "uniqueId", F.col("hop").cast("int").alias("hop"), "topic",
                     "partition", F.explode(F.array(*entries)).alias("e"))
        .where(F.col("e").isNotNull())
        .select("asOf", "rowId", "uniqueId", "hop", "topic", "partition", F.col("e")["event"].alias("event"),
                F.col("e")["time"].alias("time"), F.col("e")["seq"].cast("int").alias("seq"),
                F.col("e")["state"].alias("state"), F.col("e")["reason"].alias("reason"))
    )


def states_at(events: DataFrame, t) -> DataFrame:
    """The state of every copy at ``t`` read from an event log (``message_events``): ``rowId, state``.

    A copy's state at ``t`` is the state after its last event at or before ``t``; copies stored
    after ``t`` have no row. With the log of an evaluation at ``T >= t`` this equals the states
    of an evaluation at ``t`` itself (notebooks/replay_at_t.ipynb shows it on the demo lake).
    """
    return (
        events.where(F.col("time") <= _t(t))
        .groupBy("rowId")
        .agg(F.max_by("state", F.struct("time", "seq")).alias("state"))
    )
