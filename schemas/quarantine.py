"""The ``quarantine`` table: records that could not be decoded, with their raw bytes."""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.messages import APPEND_TABLE_PROPERTIES, LINEAGE, TS
from msglake.schemas.tables import TableSpec, stats_columns

#: Location of a quarantined record. ``topic``/``partition`` are null when the
#: file or folder name itself did not parse.
QUARANTINE_LOCATION = [
    pa.field("sourceFormat", pa.string(), nullable=False),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("segment", pa.string(), nullable=False),
    pa.field("segmentPosition", pa.int64(), nullable=False),
    pa.field("recordLength", pa.int64(), nullable=False),
]

QUARANTINE_DETAIL = [
    pa.field("reason", pa.string(), nullable=False),
    pa.field("rawBytes", pa.binary(), nullable=False),
    pa.field("quarantinedAt", TS, nullable=False),
]

#: The quality rule (quality/rules.py) that moved a decoded message here; null for records that
#: did not decode.
QUARANTINE_RULE = pa.field("rule", pa.string())

QUARANTINE_SCHEMA = pa.schema(QUARANTINE_LOCATION + QUARANTINE_DETAIL + LINEAGE[1:] + [QUARANTINE_RULE])

QUARANTINE_TABLE = TableSpec(
    name="quarantine",
    schema=QUARANTINE_SCHEMA,
    partition_by=("sourceFormat",),
    key=("sourceFormat", "topic", "partition", "segment", "segmentPosition"),
    properties={
        **APPEND_TABLE_PROPERTIES,
        **stats_columns("segment", "segmentPosition", "quarantinedAt", "ingestBatchId"),
    },
)
