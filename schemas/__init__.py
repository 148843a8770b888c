"""Table schemas of the lake: one definition per table, in Arrow, converted for Spark.

The codecs build Arrow record batches with these schemas (no Spark needed); the Spark
side uses the same definitions through :func:`msglake.schemas.spark.to_spark`.
"""
from msglake.schemas.messages import (
    DECODED_SCHEMA,
    MESSAGE_SCHEMA,
    MESSAGES_TABLE,
)
from msglake.schemas.offsets import CONSUMER_OFFSETS_SCHEMA, CONSUMER_OFFSETS_TABLE
from msglake.schemas.quality import QUALITY_RESULTS_TABLE
from msglake.schemas.quarantine import QUARANTINE_SCHEMA, QUARANTINE_TABLE
from msglake.schemas.semantics import (
    CONSUMER_EVENTS_TABLE,
    DEAD_LETTERS_TABLE,
    MESSAGE_EVENTS_TABLE,
    MESSAGE_STATES_TABLE,
)
from msglake.schemas.source import SOURCE_SCHEMA
from msglake.schemas.tables import TableSpec

#: Every table of the lake, in the order they are created.
LAKE_TABLES: tuple[TableSpec, ...] = (
    MESSAGES_TABLE, QUARANTINE_TABLE, CONSUMER_OFFSETS_TABLE, CONSUMER_EVENTS_TABLE, MESSAGE_STATES_TABLE,
    DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE, QUALITY_RESULTS_TABLE,
)
#: Their names: the folders under the lake root and the names in the session's catalog.
TABLE_NAMES: tuple[str, ...] = tuple(t.name for t in LAKE_TABLES)

__all__ = [
    "CONSUMER_EVENTS_TABLE",
    "CONSUMER_OFFSETS_SCHEMA",
    "CONSUMER_OFFSETS_TABLE",
    "DEAD_LETTERS_TABLE",
    "DECODED_SCHEMA",
    "LAKE_TABLES",
    "MESSAGE_EVENTS_TABLE",
    "MESSAGE_SCHEMA",
    "MESSAGE_STATES_TABLE",
    "MESSAGES_TABLE",
    "QUALITY_RESULTS_TABLE",
    "QUARANTINE_SCHEMA",
    "QUARANTINE_TABLE",
    "SOURCE_SCHEMA",
    "TABLE_NAMES",
    "TableSpec",
]
