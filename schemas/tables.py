"""What the lake needs to know about a table besides its columns."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


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
        missing = [c for c in self.partition_by + self.key if c not in self.schema.names]
        if missing:
            raise ValueError(f"table {self.name}: unknown columns {missing}")
