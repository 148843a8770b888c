"""Spark views of the Arrow schema definitions (imports pyspark, never starts it)."""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type


def to_spark(schema: pa.Schema) -> T.StructType:
    """Convert an Arrow schema of this package to a Spark ``StructType``, nullability kept.

    Examples
    --------
    >>> from schemas import QUARANTINE_SCHEMA
    >>> to_spark(QUARANTINE_SCHEMA)["rawBytes"].dataType
    BinaryType()
    """
    return T.StructType(
        [T.StructField(f.name, from_arrow_type(f.type), nullable=f.nullable) for f in schema]
    )


def with_all_columns(df, schema: pa.Schema):
    """``df`` in the columns of ``schema``, in its order: the columns ``df`` lacks as nulls of their
    Spark type (a table written from fewer columns than its schema, as a benchmark or a test makes)."""
    from pyspark.sql import functions as F

    given = set(df.columns)
    return df.select(*[F.col(f.name) if f.name in given else F.lit(None).cast(f.dataType).alias(f.name)
                       for f in to_spark(schema)])
