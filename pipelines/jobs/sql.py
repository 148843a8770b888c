"""``msglake sql``: Spark SQL over the lake's tables, read-only unless asked otherwise."""
from __future__ import annotations

import csv
import io
import json

from pyspark.sql import DataFrame, functions as F, types as T

from msglake.errors import QueryError, QueryRefused, spark_message
from msglake.pipelines.jobs.readonly import check_analysed, check_parsed, lake_relations, read_only_session


def run_sql(spark, sql: str, allow_writes: bool = False, read_only=None) -> DataFrame:
    """Run one statement. Read-only unless ``allow_writes``: the statement is checked on its parsed
    and analysed plans (:mod:`msglake.pipelines.jobs.readonly`) in a read-only session before
    anything of it runs, and refused unless it only reads the lake's tables and views.
    ``read_only``: such a session made before (:func:`read_only_session` of ``spark``), to reuse.
    """
    from pyspark.errors import AnalysisException

    try:
        if allow_writes:
            return spark.sql(sql)
        session = read_only or read_only_session(spark)
        lake = lake_relations(session)
        check_parsed(session, sql, lake)
        df = session.sql(sql)
        check_analysed(session, df, lake)
        return df
    except AnalysisException as e:  # ParseException included
        if e.getCondition() == "PARSE_SYNTAX_ERROR" and ";" in sql and "extra input" in str(e):
            raise QueryRefused("refused: more than one statement; give one statement per call") from None
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
