"""Idempotent Delta writes of decoded micro-batches: ``messages`` and ``quarantine``.

Each micro-batch is written with Delta's ``txnAppId``/``txnVersion``: a batch that Spark
replays after a crash (written to Delta, checkpoint not yet committed) is skipped by Delta
itself, table by table, so no row is ever written twice.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, functions as F

from schemas import MESSAGES_TABLE, QUARANTINE_TABLE
from schemas.messages import DECODED_SCHEMA, DERIVED
from schemas.quarantine import QUARANTINE_DETAIL, QUARANTINE_LOCATION
from schemas.spark import to_spark
import pyarrow as pa


@dataclass
class BatchCounts:
    """What one micro-batch carried."""

    batch_id: int
    messages: int = 0
    message_bytes: int = 0
    quarantined: int = 0
    quarantined_bytes: int = 0


@dataclass
class RunCounts:
    """Totals over the batches of one run (filled from the foreachBatch thread)."""

    batches: list[BatchCounts] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, b: BatchCounts) -> None:
        with self.lock:
            self.batches.append(b)

    def total(self, name: str) -> int:
        return sum(getattr(b, name) for b in self.batches)


_DERIVED_NULLS = to_spark(pa.schema(DERIVED))
_QUARANTINE_COLUMNS = [f.name for f in QUARANTINE_LOCATION] + [f.name for f in QUARANTINE_DETAIL if f.name != "quarantinedAt"]


def split_batch(df: DataFrame, batch_id: int) -> tuple[DataFrame, DataFrame]:
    """Source rows -> (messages rows, quarantine rows), each in its table's column order."""
    now = F.current_timestamp()
    batch = F.lit(batch_id).cast("bigint")
    is_quarantined = F.col("reason").isNotNull()
    messages = df.where(~is_quarantined).select(
        *DECODED_SCHEMA.names,
        now.alias("ingestedAt"),
        batch.alias("ingestBatchId"),
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in _DERIVED_NULLS],
    )
    quarantine = df.where(is_quarantined).select(
        *_QUARANTINE_COLUMNS, now.alias("quarantinedAt"), batch.alias("ingestBatchId")
    )
    return messages, quarantine


class DeltaSink:
    """The ``foreachBatch`` function of the ingest job.

    Parameters
    ----------
    app_id : str
        Stable id of the writing job (one per source), Delta's ``txnAppId``.
    messages_path, quarantine_path : str
        Table locations.
    """

    def __init__(self, app_id: str, messages_path: str, quarantine_path: str, counts: RunCounts | None = None):
        self.app_id = app_id
        self.paths = {MESSAGES_TABLE.name: messages_path, QUARANTINE_TABLE.name: quarantine_path}
        self.counts = counts if counts is not None else RunCounts()

    def _append(self, df: DataFrame, table: str, batch_id: int) -> None:
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", batch_id)
            .save(self.paths[table])
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # No persist(): reading Spark's cache of these rows (big binary and map columns) costs
        # more than decoding the segment bytes again (measured: 2.2x slower for the write).
        # So the batch is decoded once to count, once to write messages, and once more for
        # quarantine rows only when there are some.
        counts = BatchCounts(batch_id)
        for row in (
            df.groupBy(F.col("reason").isNull().alias("decoded"))
            .agg(F.count(F.lit(1)).alias("rows"), F.sum("recordLength").alias("bytes"))
            .collect()
        ):
            if row["decoded"]:
                counts.messages, counts.message_bytes = row["rows"], int(row["bytes"] or 0)
            else:
                counts.quarantined, counts.quarantined_bytes = row["rows"], int(row["bytes"] or 0)
        messages, quarantine = split_batch(df, batch_id)
        if counts.messages:
            self._append(messages, MESSAGES_TABLE.name, batch_id)
        if counts.quarantined:
            self._append(quarantine, QUARANTINE_TABLE.name, batch_id)
        self.counts.add(counts)
