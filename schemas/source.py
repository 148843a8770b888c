"""Rows as the msglake Spark data source emits them, before the sink splits them.

One decode pass yields both decoded messages and quarantined records, so the source has
one schema built from the two tables' definitions: every decoded column (nullable, as
quarantine rows leave them empty) plus the quarantine details. A row is quarantined
exactly when ``reason`` is not null.
"""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.messages import DECODED_SCHEMA, DEDUP
from msglake.schemas.quarantine import QUARANTINE_DETAIL, QUARANTINE_LOCATION

_decoded = [f.with_nullable(True) for f in DECODED_SCHEMA]
_extra = [
    f.with_nullable(True)
    for f in QUARANTINE_LOCATION + QUARANTINE_DETAIL
    if f.name not in DECODED_SCHEMA.names and f.name != "quarantinedAt"
]

SOURCE_SCHEMA = pa.schema(_decoded + _extra)
#: The source's rows with each message's producer-retry key (``transforms.dedup.dedup_key``), as
#: the source gives them with its ``dedupKeys`` option (retry marking on).
KEYED_SOURCE_SCHEMA = SOURCE_SCHEMA.append(next(f for f in DEDUP if f.name == "dedupKey"))

#: Columns of SOURCE_SCHEMA that only quarantine rows fill.
QUARANTINE_ONLY = tuple(f.name for f in _extra)
