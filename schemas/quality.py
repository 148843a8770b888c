"""The ``quality_results`` table: one row per check of every ``msglake quality`` run."""
from __future__ import annotations

import pyarrow as pa

from msglake.schemas.messages import APPEND_TABLE_PROPERTIES, TS
from msglake.schemas.tables import TableSpec

QUALITY_RESULTS_SCHEMA = pa.schema(
    [
        pa.field("runId", pa.string(), nullable=False),
        #: The lake table that was validated.
        pa.field("table", pa.string(), nullable=False),
        #: The ``--since`` bound of the run (rows at or after it), null for the whole table.
        pa.field("since", TS),
        pa.field("evaluatedAt", TS, nullable=False),
        #: The check's name in quality/suites.py (a row rule's name for the rule checks).
        pa.field("check", pa.string(), nullable=False),
        #: The great-expectations expectation type.
        pa.field("expectation", pa.string(), nullable=False),
        pa.field("column", pa.string()),
        #: ``error`` or ``warning``.
        pa.field("level", pa.string(), nullable=False),
        pa.field("success", pa.bool_(), nullable=False),
        pa.field("evaluated", pa.int64()),
        pa.field("unexpected", pa.int64()),
        pa.field("unexpectedPercent", pa.float64()),
        #: The JSON result of the run, where the samples are.
        pa.field("reportPath", pa.string()),
    ]
)

QUALITY_RESULTS_TABLE = TableSpec(
    name="quality_results",
    schema=QUALITY_RESULTS_SCHEMA,
    key=("runId", "check"),
    properties=dict(APPEND_TABLE_PROPERTIES),
)
