"""Table schemas of the lake: one definition per table, in Arrow, converted for Spark.

The codecs build Arrow record batches with these schemas (no Spark needed); the Spark
side uses the same definitions through :func:`schemas.spark.to_spark`.
"""
from schemas.messages import (
    DECODED_SCHEMA,
    MESSAGE_SCHEMA,
    MESSAGES_TABLE,
)
from schemas.offsets import CONSUMER_OFFSETS_SCHEMA, CONSUMER_OFFSETS_TABLE
from schemas.quarantine import QUARANTINE_SCHEMA, QUARANTINE_TABLE
from schemas.source import SOURCE_SCHEMA
from schemas.tables import TableSpec

__all__ = [
    "CONSUMER_OFFSETS_SCHEMA",
    "CONSUMER_OFFSETS_TABLE",
    "DECODED_SCHEMA",
    "MESSAGE_SCHEMA",
    "MESSAGES_TABLE",
    "QUARANTINE_SCHEMA",
    "QUARANTINE_TABLE",
    "SOURCE_SCHEMA",
    "TableSpec",
]
