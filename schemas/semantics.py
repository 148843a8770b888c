"""Tables of the semantics engine (docs/semantics.md): what consumers did, and states as of ``T``.

- ``consumer_events``: an optional input, loaded from JSON lines (``msglake events load``): one
  line per thing a consumer did with a message.
- ``message_states``: every copy of every message with its state at ``asOf`` (replay output).
- ``dead_letters``: the dead-lettered copies (hop >= 1) with their ``deathHistory``.
- ``message_events``: the state changes up to ``asOf``; the state at any ``t <= asOf`` is the
  ``state`` of the last event at or before ``t``.

Replay output tables hold one evaluation per ``asOf``: a new replay at the same ``asOf``
replaces its rows, other evaluations stay.
"""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.messages import APPEND_TABLE_PROPERTIES, DEATH, TS
from msglake.schemas.tables import TableSpec, stats_columns

#: Consumer actions (AMQP vocabulary): ``delivered`` (handed to a consumer), ``acked`` (consumed),
#: ``rejected`` (rejected without requeue: dead-letters with reason ``rejected``), ``requeued``
#: (rejected or nacked with requeue: a failed delivery, counted against ``maxDeliveries``).
CONSUMER_EVENT_KINDS = ("delivered", "acked", "rejected", "requeued")

#: The JSON-lines input, field by field (all required but ``group``).
CONSUMER_EVENT_FIELDS = {
    "topic": "topic the consumer read the message from (a dead-letter topic for a copy)",
    "messageId": "the id the consumer saw: the message's RocketMQ UNIQ_KEY or offset msgId, or NSQ's "
                 "16-character id (the messageId column)",
    "partition": "the partition (NSQ) or queue id (RocketMQ) the consumer read it from (optional; required "
                 "where the id alone names more than one message, as NSQ ids do across partitions)",
    "group": "consumer group (optional)",
    "event": "one of " + ", ".join(CONSUMER_EVENT_KINDS),
    "time": "ISO-8601 time with zone, e.g. 2026-11-01T10:00:00.250Z",
}

CONSUMER_EVENTS_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("messageId", pa.string(), nullable=False),
        pa.field("partition", pa.int32()),
        pa.field("group", pa.string()),
        pa.field("event", pa.string(), nullable=False),
        pa.field("time", TS, nullable=False),
        #: The file the line came from and its line number (1-based).
        pa.field("sourceFile", pa.string()),
        pa.field("sourceLine", pa.int64()),
        #: The message the event names, as the engine knows it (``uniqueId`` of ``message_states``),
        #: resolved from ``messageId`` (and ``partition``) when loaded; null when the lake held no
        #: such message then (a dead-letter copy's topic, or not ingested yet): ``messageId`` is used.
        pa.field("uniqueId", pa.string()),
        pa.field("ingestedAt", TS),
    ]
)

CONSUMER_EVENTS_TABLE = TableSpec(
    name="consumer_events",
    schema=CONSUMER_EVENTS_SCHEMA,
    key=("topic", "messageId", "partition", "event", "time", "group"),
    properties=dict(APPEND_TABLE_PROPERTIES),
)

#: States of a message copy at ``T`` (semantics.md §7): exactly one per copy.
STATES = ("scheduled", "ready", "expired", "dead_lettered", "dropped")
#: Events of ``message_events``.
EVENTS = ("stored", "scheduled", "ready", "consumed", "expired", "dead_lettered", "dropped")
#: Why a copy left its topic (``stateReason``): the dead-letter reasons, and why one was dropped.
REASONS = ("expired", "rejected", "maxlen", "delivery_limit", "cycle", "missing_target", "hop_limit")

#: The evaluation time of a replay; null for rows the streaming job (``msglake semantics``) logged
#: as the watermark passed them.
AS_OF = pa.field("asOf", TS)

_COPY = [
    AS_OF,
    #: Identity of this copy: a stored row's location hash, or its parent's id + the target topic.
    pa.field("rowId", pa.string(), nullable=False),
    #: The message across copies: uniqueId (RocketMQ UNIQ_KEY) when there is one, else messageId.
    pa.field("uniqueId", pa.string(), nullable=False),
    pa.field("parentRowId", pa.string()),
    #: 0 for a message as published; n for its n-th dead-lettered copy.
    pa.field("hop", pa.int32(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    #: Where the broker stored it; null for a copy the engine derived (not in the segments).
    pa.field("sourceFormat", pa.string()),
    pa.field("segment", pa.string()),
    pa.field("segmentPosition", pa.int64()),
    pa.field("queueOffset", pa.int64()),
    #: When this copy entered its topic (a dead-lettered copy: the time of the death).
    pa.field("storeTimestamp", TS, nullable=False),
    pa.field("deliverAt", TS, nullable=False),
    pa.field("expireAt", TS),
    pa.field("effectivePriority", pa.int32()),
    pa.field("messageType", pa.string()),
    pa.field("bodySize", pa.int32()),
    pa.field("state", pa.string(), nullable=False),
    #: For expired, dead_lettered and dropped: one of REASONS.
    pa.field("stateReason", pa.string()),
    #: When the copy entered its state.
    pa.field("stateTime", TS, nullable=False),
    #: When a consumer acknowledged it (consumer events, or the first offset snapshot past it).
    pa.field("consumedAt", TS),
    #: Where a dead-lettered copy went.
    pa.field("deadLetterTopic", pa.string()),
    pa.field("exchange", pa.string()),
    pa.field("routingKey", pa.string()),
    pa.field("cc", pa.list_(pa.string())),
    pa.field("deathHistory", pa.list_(DEATH)),
    pa.field("firstDeathQueue", pa.string()),
    pa.field("firstDeathReason", pa.string()),
    pa.field("firstDeathExchange", pa.string()),
]

#: File statistics of the copy tables: the evaluation time every query of a replay filters on, a
#: copy's and its message's ids (a story, a join with messages or events), its times, and what
#: ``v_trace`` keeps (derived copies: ``hop > 0``, ``segment`` null). With Delta's default (the
#: first 32 columns, the death history's fields one by one) each write task built the aggregation
#: of them all: a write of 830 rows 0.56-0.64 s instead of 0.38-0.39 s.
_COPY_STATS = stats_columns("asOf", "rowId", "uniqueId", "hop", "segment", "storeTimestamp", "stateTime")

MESSAGE_STATES_TABLE = TableSpec(
    name="message_states", schema=pa.schema(_COPY), partition_by=("topic",),
    key=("asOf", "rowId"), properties=dict(_COPY_STATS),
)

#: Same columns: the copies with hop >= 1, i.e. the messages as the dead-letter topics hold them.
#: Each ``msglake semantics`` batch appends to ``dead_letters`` and ``message_events``: a Delta
#: checkpoint of their log every 100 commits, not every 10 (a checkpoint made a small append about
#: 2 s instead of 0.2 s here), as for the other appended tables.
DEAD_LETTERS_TABLE = TableSpec(
    name="dead_letters", schema=pa.schema(_COPY), partition_by=("topic",),
    key=("asOf", "rowId"), properties={**APPEND_TABLE_PROPERTIES, **_COPY_STATS},
)

MESSAGE_EVENTS_TABLE = TableSpec(
    name="message_events",
    schema=pa.schema(
        [
            AS_OF,
            pa.field("rowId", pa.string(), nullable=False),
            pa.field("uniqueId", pa.string(), nullable=False),
            pa.field("hop", pa.int32(), nullable=False),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("event", pa.string(), nullable=False),
            pa.field("time", TS, nullable=False),
            #: Order of events of one copy at the same time.
            pa.field("seq", pa.int32(), nullable=False),
            #: The copy's state after this event.
            pa.field("state", pa.string(), nullable=False),
            pa.field("reason", pa.string()),
        ]
    ),
    partition_by=("topic",),
    key=("asOf", "rowId", "seq"),
    properties={**APPEND_TABLE_PROPERTIES, **stats_columns("asOf", "rowId", "uniqueId", "time")},
)
