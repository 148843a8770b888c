"""``msglake quality``: validate a lake table with its expectation suite and write the report.

One run reads the Delta table (optionally only rows at or after ``--since``), validates it with
great-expectations (ephemeral context, suite from quality/suites.py), and writes:

- ``<reports>/<runId>.json``: the summary (per check: level, pass/fail, counts, sample failing
  rows), the chart data and great-expectations' own validation result;
- ``<reports>/<runId>.html``: a self-contained page (inline styles and SVG charts, no URL to
  fetch), readable offline;
- one row per check appended to the ``quality_results`` Delta table, for the history.
"""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import orjson
from pyspark.sql import DataFrame, SparkSession, functions as F

from msglake.errors import ConfigError, LakeError
from msglake.pipelines.io.catalog import ensure_table
from msglake.schemas import LAKE_TABLES
from msglake.pipelines.settings import Settings
from msglake.quality import suites
from msglake.quality.report_html import render
from msglake.schemas.quality import QUALITY_RESULTS_TABLE

#: Failing rows shown per check.
SAMPLES = 20
#: Edges (ms) of the store-minus-born latency histogram; values outside are put in the end bins.
LATENCY_EDGES_MS = [-3_600_000, 0, 1, 10, 100, 1_000, 10_000, 60_000, 600_000, 3_600_000, 86_400_000]
#: Bucket widths tried for "volume over time", smallest first: the first giving <= 60 buckets wins.
BUCKET_SECONDS = (60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
MAX_SERIES = 10


@dataclass
class QualityRun:
    table: str
    report: dict
    json_path: str
    html_path: str

    @property
    def errors(self) -> list[dict]:
        return [r for r in self.report["results"] if r["level"] == "error" and not r["success"]]

    def lines(self) -> list[str]:
        r = self.report
        s = r["statistics"]
        out = [f"quality {r['table']}: {r['rows']:,} rows{' since ' + r['since'] if r['since'] else ''}, "
               f"{s['evaluated']} checks, {s['failed']} failed ({s['failedErrors']} at error level) -> "
               f"{'PASS' if r['success'] else 'FAIL'}"]
        for res in r["results"]:
            mark = "ok  " if res["success"] else ("FAIL" if res["level"] == "error" else "warn")
            counts = f"{res['unexpected']:,} of {res['evaluated']:,}" if res["evaluated"] is not None else ""
            out.append(f"  {mark} {res['name']:<22} {res['level']:<8} {counts:>22}  {res['description']}"
                       + (f" -- could not be checked: {res['error']}" if res.get("error") else ""))
        out += [f"  report: {self.html_path}", f"  json:   {self.json_path}"]
        return out


def check_table(settings: Settings, table: str) -> str:
    """The table's path; a table not in the lake yet is an error saying which job makes it (no Spark needed)."""
    path = settings.lake.table_path(table)
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        hint = "msglake replay" if table == "dead_letters" else "msglake ingest"
        raise LakeError(f"table {table} not found at {path}: run {hint} first")
    return path


def _table(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    path = check_table(settings, table)
    # A table an older msglake wrote gains the columns the suite checks (e.g. quarantine.rule).
    ensure_table(spark, settings, next(spec for spec in LAKE_TABLES if spec.name == table))
    return spark.read.format("delta").load(path)


def _validate(df: DataFrame, table: str, checks: list[suites.Check]):
    """Run the suite on ``df``; returns great-expectations' validation result."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no network here; never phone home
    gx = suites.great_expectations()
    ProgressBarsConfig = suites.great_expectations("great_expectations.data_context.types.base").ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    # persist=False: caching the rows (body, header maps) costs more than reading the table again.
    source = context.data_sources.add_spark("lake", persist=False)
    batch = source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("rows")
    suite = context.suites.add(gx.ExpectationSuite(name=f"msglake.{table}"))
    for check in checks:
        suite.add_expectation(suites.expectation(check))
    definition = context.validation_definitions.add(gx.ValidationDefinition(data=batch, suite=suite, name=table))
    return definition.run(batch_parameters={"dataframe": df}, result_format={
        "result_format": "SUMMARY",
        "partial_unexpected_count": SAMPLES,
        "unexpected_index_column_names": suites.SAMPLE_COLUMNS[table],
    })


def _plain(value):
    """A JSON-friendly scalar for the report's samples."""
    if isinstance(value, (bytes, bytearray)):
        return value[:64].hex()
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _result_entry(check: suites.Check, res: dict, rows: int) -> dict:
    result = res.get("result") or {}
    error = (res.get("exception_info") or {}).get("exception_message") if (
        res.get("exception_info") or {}).get("raised_exception") else None
    samples = result.get("partial_unexpected_index_list") or []
    if not samples and result.get("partial_unexpected_list"):
        samples = [v if isinstance(v, dict) else {"value": v} for v in result["partial_unexpected_list"]]
    evaluated = result.get("element_count", rows if check.kind != "ExpectTableRowCountToBeBetween" else None)
    unexpected = result.get("unexpected_count")
    if check.kind == "ExpectTableRowCountToBeBetween":
        unexpected = 0 if res["success"] else 1
    if error is not None:
        evaluated, unexpected = None, None
    return {
        "name": check.name,
        "expectation": res["expectation_config"]["type"],
        "column": check.column,
        "level": check.level,
        "description": check.description,
        "success": bool(res["success"]),
        "evaluated": evaluated,
        "unexpected": unexpected if error is not None else unexpected or 0,
        "unexpectedPercent": round(float(result.get("unexpected_percent") or 0.0), 6),
        "samples": [{k: _plain(v) for k, v in s.items()} for s in samples[:SAMPLES]],
        # The check could not be computed (great-expectations caught an exception): say why.
        "error": error,
    }


def _bucket_seconds(lo: dt.datetime, hi: dt.datetime) -> int:
    span = max((hi - lo).total_seconds(), 1)
    return next((b for b in BUCKET_SECONDS if span / b <= 60), BUCKET_SECONDS[-1])


def volume_over_time(df: DataFrame, time_column: str, label: str = "topic") -> dict:
    """Chart data (quality.charts.stacked_series): rows per bucket of ``time_column`` and per ``label`` (the biggest MAX_SERIES labels, the rest as "other")."""
    bounds = df.agg(F.min(time_column).alias("lo"), F.max(time_column).alias("hi")).first()
    if bounds["lo"] is None:
        return {"buckets": [], "series": {}}
    width = _bucket_seconds(bounds["lo"], bounds["hi"])
    # Labels made by Spark in the session's time zone (UTC): collect() would give naive local times.
    bucket = F.date_format(F.timestamp_seconds(F.floor(F.unix_seconds(F.col(time_column)) / width) * width),
                           "yyyy-MM-dd'T'HH:mm'Z'")
    rows = df.groupBy(bucket.alias("bucket"), F.coalesce(F.col(label), F.lit("(none)")).alias("label")).count().collect()
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["label"]] = totals.get(r["label"], 0) + r["count"]
    top = sorted(totals, key=lambda k: (-totals[k], k))[:MAX_SERIES]
    buckets = sorted({r["bucket"] for r in rows})
    index = {b: i for i, b in enumerate(buckets)}
    series = {name: [0] * len(buckets) for name in top}
    for r in rows:
        name = r["label"] if r["label"] in series else "other"
        series.setdefault(name, [0] * len(buckets))[index[r["bucket"]]] += r["count"]
    return {"buckets": buckets, "series": series, "bucketSeconds": width}


def latency_histogram(df: DataFrame) -> dict:
    """Chart data (quality.charts.histogram): messages by store-minus-born latency, LATENCY_EDGES_MS bins."""
    latency = F.unix_millis("storeTimestamp") - F.unix_millis("bornTimestamp")
    edges = LATENCY_EDGES_MS
    clipped = F.least(F.greatest(latency, F.lit(edges[0])), F.lit(edges[-1] - 1))
    index = F.lit(0)
    for i, edge in enumerate(edges[1:-1], start=1):
        index = F.when(clipped >= edge, F.lit(i)).otherwise(index)
    counts = dict(df.where(F.col("bornTimestamp").isNotNull()).groupBy(index.alias("bin")).count().collect())
    return {"edges": edges, "counts": [counts.get(i, 0) for i in range(len(edges) - 1)]}


def counts_by(df: DataFrame, column, title: str) -> dict:
    rows = df.groupBy(column.alias("k")).count().orderBy(F.desc("count"), "k").limit(15).collect()
    return {"title": title, "items": [[r["k"] if r["k"] is not None else "(none)", r["count"]] for r in rows]}


def _charts(table: str, df: DataFrame) -> dict:
    if table == "messages":
        return {"volumeByTopic": volume_over_time(df, "storeTimestamp"), "latencyMs": latency_histogram(df)}
    if table == "dead_letters":
        reason = F.coalesce(F.get(F.col("deathHistory"), 0)["reason"], F.col("stateReason"))
        return {"volumeByTopic": volume_over_time(df, "storeTimestamp"), "byReason": counts_by(df, reason, "Dead letters by reason")}
    # Quarantine: a rule's name, else the decode reason up to its first detail.
    reason = F.coalesce(F.col("rule"), F.regexp_extract("reason", r"^([^:(0-9]*)", 1))
    return {"volumeByTopic": volume_over_time(df, "quarantinedAt"), "byReason": counts_by(df, F.trim(reason), "Quarantined by reason")}


def run_quality(spark: SparkSession, settings: Settings, table: str, since: dt.datetime | None = None,
                out_dir: str | None = None, evaluated_at: dt.datetime | None = None) -> QualityRun:
    """Validate ``table`` (rows at or after ``since``), write the JSON and HTML report, append the results.

    ``evaluated_at`` names the run (default: now); nothing in the checks depends on it.
    """
    if table not in suites.TABLES:
        raise ConfigError(f"no quality suite for table {table!r}; tables with one: {', '.join(suites.TABLES)}")
    evaluated_at = (evaluated_at or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    df = _table(spark, settings, table)
    if since is not None:
        df = df.where(F.col(suites.TIME_COLUMN[table]) >= F.lit(since))
    levels = settings.quality.levels()
    checks = suites.checks(table, levels)
    prepared = suites.prepare(table, df, settings.quality.rule_context(settings.policies), levels)
    validation = _validate(prepared, table, checks).to_json_dict()
    rows = df.count()
    # great-expectations returns results grouped by column, not in suite order: match them by name.
    by_name = {r["expectation_config"]["meta"]["name"]: r for r in validation["results"]}
    results = [_result_entry(c, by_name[c.name], rows) for c in checks]
    failed = [r for r in results if not r["success"]]
    run_id = f"{evaluated_at.strftime('%Y%m%dT%H%M%S%fZ')}-{table}"
    out_dir = os.path.abspath(out_dir or settings.report_dir())
    os.makedirs(out_dir, exist_ok=True)
    json_path, html_path = os.path.join(out_dir, f"{run_id}.json"), os.path.join(out_dir, f"{run_id}.html")
    report = {
        "table": table,
        "since": since.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z") if since else None,
        "runId": run_id,
        "evaluatedAt": evaluated_at.isoformat().replace("+00:00", "Z"),
        "lake": os.path.abspath(settings.lake.root),
        "rows": rows,
        "success": not any(r["level"] == "error" for r in failed),
        "statistics": {"evaluated": len(results), "successful": len(results) - len(failed), "failed": len(failed),
                       "failedErrors": sum(r["level"] == "error" for r in failed)},
        "results": results,
        "charts": _charts(table, df),
    }
    with open(json_path, "wb") as f:
        f.write(orjson.dumps({**report, "greatExpectations": validation}, default=str,
                             option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(render(report))
    _append_results(spark, settings, report, since, evaluated_at, json_path)
    return QualityRun(table, report, json_path, html_path)


def _append_results(spark: SparkSession, settings: Settings, report: dict, since, evaluated_at, json_path) -> None:
    from msglake.schemas.spark import to_spark

    rows = [
        (report["runId"], report["table"], since, evaluated_at, r["name"], r["expectation"], r["column"], r["level"],
         r["success"], r["evaluated"], r["unexpected"], r["unexpectedPercent"], json_path)
        for r in report["results"]
    ]
    path = ensure_table(spark, settings, QUALITY_RESULTS_TABLE)
    spark.createDataFrame(rows, to_spark(QUALITY_RESULTS_TABLE.schema)).write.format("delta").mode("append").save(path)
