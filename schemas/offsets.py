"""The ``consumer_offsets`` table: snapshots of a broker's consumer positions.

RocketMQ keeps, per consumer group, the next queue offset to consume in each queue
(``config/consumerOffset.json``); its ConsumeQueue tells how many messages each queue holds.
A snapshot is taken when the file changes; the semantics transforms read it to know what
was consumed: a message with ``queueOffset < offset`` was consumed by ``group``.
"""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.messages import APPEND_TABLE_PROPERTIES, TS
from msglake.schemas.tables import TableSpec

CONSUMER_OFFSETS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),  # the configured source name
        pa.field("group", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue", pa.int32(), nullable=False),
        #: Next queue offset the group will consume: every message below it was consumed.
        pa.field("offset", pa.int64(), nullable=False),
        #: Messages the queue holds (the ConsumeQueue's entry count), when consumequeue/ is there.
        pa.field("queueMaxOffset", pa.int64()),
        #: When the broker wrote the offsets file (its modification time).
        pa.field("snapshotTime", TS, nullable=False),
        #: ``dataVersion.counter`` of the file, which the broker bumps on each change.
        pa.field("dataVersion", pa.int64()),
        pa.field("ingestedAt", TS, nullable=False),
    ]
)

CONSUMER_OFFSETS_TABLE = TableSpec(
    name="consumer_offsets",
    schema=CONSUMER_OFFSETS_SCHEMA,
    key=("source", "group", "topic", "queue", "snapshotTime"),
    properties=dict(APPEND_TABLE_PROPERTIES),
)
