"""What the lake needs to know about a table besides its columns."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

#: Delta's table property naming the columns whose minimum, maximum and null count each data file
#: records (Delta's default: the first 32 columns, nested fields counted one by one). The
#: statistics are what data skipping reads, and every write task builds their aggregation for the
#: columns named: a table names the columns its queries filter on, no more.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"


def stats_columns(*names: str) -> dict[str, str]:
    """The table property :data:`STATS_COLUMNS` for ``names``."""
    return {STATS_COLUMNS: ",".join(names)}


@dataclass(frozen=True)
class TableSpec:
    """A Delta table of the lake.

    Parameters
    ----------
    name : str
        Table name, also the folder under the lake root and the catalog name.
    schema : pyarrow.Schema
        The columns, as the single definition of the table.
    partition_by : tuple of str
        Partition columns, in order.
    key : tuple of str
        The columns that identify a row (used for idempotent re-runs and checks).
    """

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        stats = [c for c in self.properties.get(STATS_COLUMNS, "").split(",") if c]
        missing = [c for c in self.partition_by + self.key + tuple(stats) if c not in self.schema.names]
        if missing:
            raise ValueError(f"table {self.name}: unknown columns {missing}")
