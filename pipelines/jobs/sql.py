"""``msglake sql``: Spark SQL over the lake's tables, read-only unless asked otherwise."""
from __future__ import annotations

import csv
import io
import json

from pyspark.sql import DataFrame, functions as F, types as T

from msglake.errors import QueryError, QueryRefused, spark_message

#: Commands that only read (parsed plans that are Spark "commands" but change nothing).
READ_ONLY_COMMANDS = frozenset(
    """ShowTables ShowViews ShowColumns ShowCreateTable ShowTableProperties ShowPartitions ShowFunctions
    ShowNamespaces DescribeRelation DescribeColumn DescribeNamespace DescribeFunction DescribeQueryCommand
    ExplainCommand""".split()
)


def statement(spark, sql: str) -> tuple[str, bool]:
    """(kind of the parsed statement, whether it may write), without running it."""
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(sql)
    kind = plan.getClass().getSimpleName()
    command = spark._jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    writes = kind == "InsertIntoStatement" or (command.isInstance(plan) and kind not in READ_ONLY_COMMANDS)
    return kind, writes


def run_sql(spark, sql: str, allow_writes: bool = False) -> DataFrame:
    """Run one statement; one that may write is refused unless ``allow_writes``.

    The check happens on the parsed plan before anything runs (``spark.sql`` would execute a
    command at once).
    """
    from pyspark.errors import AnalysisException

    try:
        kind, writes = statement(spark, sql)
        if writes and not allow_writes:
            raise QueryRefused(f"refused: {kind} can change the lake; msglake sql is read-only unless --allow-writes "
                               "is given")
        return spark.sql(sql)
    except AnalysisException as e:  # ParseException included
        raise QueryError(f"SQL error: {spark_message(e)}") from None


def printable(df: DataFrame) -> DataFrame:
    """Columns as text-friendly values: binary as base64, maps/arrays/structs as JSON."""
    cols = []
    for f in df.schema.fields:
        c = F.col(f"`{f.name}`")
        if isinstance(f.dataType, T.BinaryType):
            c = F.base64(c)
        elif isinstance(f.dataType, (T.MapType, T.ArrayType, T.StructType)):
            c = F.to_json(c)
        cols.append(c.alias(f.name))
    return df.select(*cols)


def render(df: DataFrame, fmt: str, limit: int) -> str:
    """``table`` (aligned text), ``json`` (one object per line) or ``csv`` (with a header)."""
    if fmt == "table":
        return df._jdf.showString(limit, 0, False)
    rows = printable(df).limit(limit).collect()
    if fmt == "json":
        return "".join(json.dumps(r.asDict(), default=str, ensure_ascii=False) + "\n" for r in rows)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(df.columns)
    writer.writerows([[("" if v is None else v) for v in r] for r in rows])
    return out.getvalue()
