"""The unified message schema (docs/message-schema.md), column by column.

Groups follow the spec. ``DECODED_SCHEMA`` is what a codec produces from segment bytes;
``MESSAGE_SCHEMA`` adds lineage (written by the sink) and the columns derived by the
semantics transforms (null until those run).
"""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.tables import TableSpec, stats_columns

TS = pa.timestamp("us", tz="UTC")
STR_MAP = pa.map_(pa.string(), pa.string())

PLACEMENT = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("sourceFormat", pa.string(), nullable=False),
    pa.field("segment", pa.string(), nullable=False),
    pa.field("segmentPosition", pa.int64(), nullable=False),
    pa.field("queueOffset", pa.int64()),
    pa.field("physicalOffset", pa.int64()),
    pa.field("messageId", pa.string(), nullable=False),
    pa.field("uniqueId", pa.string()),
]

OPENMESSAGING = [
    pa.field("bornTimestamp", TS),
    pa.field("bornHost", pa.string()),
    pa.field("storeTimestamp", TS, nullable=False),
    pa.field("storeHost", pa.string()),
    pa.field("priority", pa.int32(), nullable=False),
    pa.field("durability", pa.int32(), nullable=False),
    pa.field("searchKey", pa.string()),
    pa.field("delayTime", pa.int64()),
    pa.field("startDeliverTime", TS),
    pa.field("expireTime", TS),
    pa.field("traceId", pa.string()),
    pa.field("compression", pa.string()),
    pa.field("transactionId", pa.string()),
    pa.field("deliveryCount", pa.int32(), nullable=False),
    pa.field("correlationId", pa.string()),
    pa.field("messageKey", pa.string()),
]

ROCKETMQ_STYLE = [
    pa.field("tags", pa.string()),
    pa.field("keys", pa.list_(pa.string())),
    pa.field("messageType", pa.string()),
    pa.field("flag", pa.int32()),
    pa.field("sysFlag", pa.int32()),
    pa.field("bodyCrc", pa.int32()),
    # Not in the spec's table, added by msglake (spec semantics.md §6 and rocketmq-commitlog.md §5.4):
    #: True for a broker-internal copy (RocketMQ system topics such as SCHEDULE_TOPIC_XXXX).
    pa.field("systemCopy", pa.bool_()),
    #: RocketMQ SYSFLAG transaction bits: PREPARED, COMMIT, ROLLBACK; null when not transactional.
    pa.field("transactionState", pa.string()),
    #: RocketMQ PREPAREDTRANSACTIONOFFSET: for a COMMIT record, the half message's physical offset.
    pa.field("preparedTransactionOffset", pa.int64()),
    #: RocketMQ: the UNIQ_KEY the producer gave this message, the first in its properties. For a
    #: batch send the broker appends the batch's own properties (its UNIQ_KEY among them) after
    #: each message's, so ``uniqueId`` (the last, as RocketMQ's MessageDecoder reports) is the
    #: batch's for every member; this column tells them apart. Null for NSQ.
    pa.field("producerUniqueId", pa.string()),
]

PAYLOAD = [
    pa.field("properties", STR_MAP, nullable=False),
    pa.field("headers", STR_MAP, nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("bodySize", pa.int32(), nullable=False),
]

LINEAGE = [
    pa.field("ingestedAt", TS, nullable=False),
    pa.field("ingestBatchId", pa.int64(), nullable=False),
]

#: Producer retries (see transforms/dedup.py): not in the OpenMessaging model, added by msglake.
DEDUP = [
    pa.field("dedupKey", pa.string()),
    pa.field(
        "retryOf",
        pa.struct([pa.field("partition", pa.int32()), pa.field("segment", pa.string()),
                   pa.field("segmentPosition", pa.int64())]),
    ),
]

DEATH = pa.struct(
    [
        pa.field("queue", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("count", pa.int64()),
        pa.field("time", TS),
        pa.field("exchange", pa.string()),
        pa.field("routingKeys", pa.list_(pa.string())),
        pa.field("originalExpiration", pa.string()),
    ]
)

#: Filled per evaluation time in ``message_states`` (schemas/semantics.py) by ``msglake replay``;
#: null in ``messages``, whose rows are what the broker stored, whatever the time.
DERIVED = [
    pa.field("deliverAt", TS),
    pa.field("expireAt", TS),
    pa.field("state", pa.string()),
    pa.field("deathHistory", pa.list_(DEATH)),
]

#: Columns a codec fills from the segment bytes.
DECODED_SCHEMA = pa.schema(PLACEMENT + OPENMESSAGING + ROCKETMQ_STYLE + PAYLOAD)

#: The ``messages`` table.
MESSAGE_SCHEMA = pa.schema(PLACEMENT + OPENMESSAGING + ROCKETMQ_STYLE + PAYLOAD + LINEAGE + DEDUP + DERIVED)

#: Priority of a message whose source gives none (OpenMessaging default).
DEFAULT_PRIORITY = 5

#: Delta properties shared by the lake's append-heavy tables. A streaming job commits every
#: few seconds: with Delta's default checkpoint every 10 commits, writing the checkpoint cost
#: more than the appends between them (measured 2-4 s against 0.3 s per small append).
APPEND_TABLE_PROPERTIES = {"delta.checkpointInterval": "100"}

MESSAGES_TABLE = TableSpec(
    name="messages",
    schema=MESSAGE_SCHEMA,
    partition_by=("topic", "partition"),
    key=("sourceFormat", "topic", "partition", "segment", "segmentPosition"),
    properties={
        **APPEND_TABLE_PROPERTIES,
        # File statistics only where queries filter (the default, the first 32 columns, took
        # half of a small append's time).
        **stats_columns("storeTimestamp", "bornTimestamp", "traceId", "messageId", "uniqueId", "queueOffset",
                        "segment", "segmentPosition", "ingestBatchId"),
    },
)
