"""``msglake replay`` and ``msglake events load``: the semantics engine over the lake or over files.

Inputs come from the lake's tables (``messages``, ``consumer_events``, ``consumer_offsets``;
policies from the settings) or from files: messages as JSON lines in the unified schema,
policies as YAML, consumer events as JSON lines. Outputs go to the Delta tables
``message_states``, ``dead_letters`` and ``message_events`` (replacing the rows of the same
``asOf``), or, with ``--json-out DIR``, to sorted JSON-lines files that are the same bytes for
the same inputs and ``T``.
"""
from __future__ import annotations

import datetime as dt
import glob
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import orjson
import pyarrow as pa
import yaml
from pyspark.sql import DataFrame, SparkSession, functions as F

from msglake.errors import ConfigError, InputError, LakeError
from msglake.pipelines.io.catalog import ensure_table, register_tables
from msglake.pipelines.settings import Settings, policy_dicts
from msglake.schemas import MESSAGE_SCHEMA
from msglake.schemas.semantics import (
    CONSUMER_EVENT_FIELDS,
    CONSUMER_EVENT_KINDS,
    CONSUMER_EVENTS_SCHEMA,
    CONSUMER_EVENTS_TABLE,
    DEAD_LETTERS_TABLE,
    MESSAGE_EVENTS_TABLE,
    MESSAGE_STATES_TABLE,
)
from msglake.schemas.spark import to_spark
from msglake.pipelines.jobs.evaluate import Evaluation

#: JSON-lines outputs, file name -> sort key (a total order, so the bytes never depend on Spark's plan).
JSON_OUTPUTS = {
    "message_states": ("topic", "hop", "uniqueId", "rowId"),
    "dead_letters": ("topic", "hop", "uniqueId", "rowId"),
    "message_events": ("topic", "hop", "uniqueId", "rowId", "seq"),
}
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


@dataclass
class RejectedLine:
    file: str
    line: int
    reason: str


@dataclass
class Loaded:
    df: DataFrame | None
    rows: int = 0
    rejected: list[RejectedLine] = field(default_factory=list)


def load_policies(path: str) -> dict[str, dict]:
    """Topic policies from a YAML file: a ``policies:`` mapping (a settings file) or the bare mapping."""
    from msglake.pipelines.settings import checked_policies

    with open(path, "rb") as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of topic pattern -> policy")
    doc = doc.get("policies", doc) if "policies" in doc else doc
    return checked_policies(doc, path)


def policies_of(settings: Settings) -> dict[str, dict]:
    return policy_dicts(settings.policies)


def read_consumer_events(spark: SparkSession, paths: list[str], messages: DataFrame | None = None) -> Loaded:
    """Consumer events from JSON-lines files; a line that does not fit is listed, never dropped silently.

    With ``messages``, each event is resolved to the message it names (its ``uniqueId``); an
    event whose id fits several messages is refused with the line and the candidates.
    """
    good: dict[str, list] = {f.name: [] for f in CONSUMER_EVENTS_SCHEMA}
    rejected: list[RejectedLine] = []
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"consumer events: no such file: {path}")
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    rec = orjson.loads(raw)
                    row = _event_row(rec)
                except (orjson.JSONDecodeError, ValueError, TypeError) as e:
                    rejected.append(RejectedLine(path, n, str(e)))
                    continue
                for k, v in row.items():
                    good[k].append(v)
                good["sourceFile"].append(os.path.abspath(path))
                good["sourceLine"].append(n)
                good["ingestedAt"].append(None)  # set by the loader that writes the table
                good["uniqueId"].append(None)  # resolved against the messages, when given
    table = pa.table(good, schema=CONSUMER_EVENTS_SCHEMA)
    if not table.num_rows:
        return Loaded(None, 0, rejected)
    df = spark.createDataFrame(table)
    if messages is None:
        return Loaded(df, table.num_rows, rejected)
    return _resolved(df, messages, rejected)


def _resolved(events: DataFrame, messages: DataFrame, rejected: list[RejectedLine]) -> Loaded:
    from msglake.transforms.lifecycle import resolve_events

    resolved = resolve_events(events, messages).localCheckpoint(eager=False)  # read again below
    is_ambiguous = F.size("matches") > 1
    counts = resolved.agg(F.count_if(is_ambiguous).alias("ambiguous"), F.count_if(~is_ambiguous).alias("good")).first()
    if counts["ambiguous"]:
        ambiguous = resolved.where(is_ambiguous).orderBy("sourceFile", "sourceLine").collect()
        rejected = rejected + [RejectedLine(r["sourceFile"], r["sourceLine"], _ambiguity(r)) for r in ambiguous]
    good = resolved.where(~is_ambiguous).select(*CONSUMER_EVENTS_SCHEMA.names)
    return Loaded(good, counts["good"], rejected)


def _ambiguity(event) -> str:
    """Why an event that fits several messages is refused, and what would name one."""
    matches = event["matches"]
    where = f"{event['topic']!r}" + ("" if event["partition"] is None else f" partition {event['partition']}")
    partitions = sorted({m["partition"] for m in matches})
    if event["partition"] is None and len(partitions) > 1:
        return (f"ambiguous: id {event['messageId']!r} names {len(matches)} messages in {where} (partitions "
                f"{', '.join(map(str, partitions))}); add \"partition\"")
    return (f"ambiguous: id {event['messageId']!r} names {len(matches)} messages in {where} (their own ids "
            f"{', '.join(m['uniqueId'] for m in matches[:5])}{', ...' if len(matches) > 5 else ''}: "
            "a batch send's shared UNIQ_KEY?); name the message by its own UNIQ_KEY or offset msgId")


def _event_row(rec) -> dict:
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(rec) - set(CONSUMER_EVENT_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; fields: {sorted(CONSUMER_EVENT_FIELDS)}")
    for k in ("topic", "messageId", "event", "time"):
        if not isinstance(rec.get(k), str) or not rec[k]:
            raise ValueError(f"{k}: a non-empty string is required")
    if rec["event"] not in CONSUMER_EVENT_KINDS:
        raise ValueError(f"event: {rec['event']!r} is not one of {list(CONSUMER_EVENT_KINDS)}")
    if rec.get("group") is not None and not isinstance(rec["group"], str):
        raise ValueError("group: a string is required")
    partition = rec.get("partition")
    if partition is not None and (type(partition) is not int or not 0 <= partition < 1 << 31):
        raise ValueError(f"partition: a whole number >= 0 is required (got {partition!r})")
    t = dt.datetime.fromisoformat(rec["time"].replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError("time: give a zone (Z or +hh:mm)")
    return {"topic": rec["topic"], "messageId": rec["messageId"], "partition": partition,
            "group": rec.get("group"), "event": rec["event"], "time": t}


def load_events_table(spark: SparkSession, settings: Settings, paths: list[str]) -> tuple[Loaded, int]:
    """Append consumer events from files to ``consumer_events``; lines already there are not added twice."""
    from delta.tables import DeltaTable

    loaded = read_consumer_events(spark, paths, lake_table(spark, settings, "messages"))
    path = ensure_table(spark, settings, CONSUMER_EVENTS_TABLE)
    if loaded.df is None:
        return loaded, 0
    before = spark.read.format("delta").load(path).count()
    new = loaded.df.withColumn("ingestedAt", F.current_timestamp()).dropDuplicates(list(CONSUMER_EVENTS_TABLE.key))
    cond = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in CONSUMER_EVENTS_TABLE.key)
    DeltaTable.forPath(spark, path).alias("t").merge(new.alias("s"), cond).whenNotMatchedInsertAll().execute()
    return loaded, spark.read.format("delta").load(path).count() - before


def read_messages_json(spark: SparkSession, path: str) -> Loaded:
    """Messages in the unified schema, one JSON object per line (only topic, messageId and
    storeTimestamp are required; timestamps ISO-8601). Lines that do not parse are listed."""
    files = message_files(path)
    schema = to_spark(MESSAGE_SCHEMA)
    fields = [f for f in schema.fields if f.name not in ("deathHistory", "state", "deliverAt", "expireAt")]
    from pyspark.sql.types import StringType, StructField, StructType

    read_schema = StructType([StructField(f.name, f.dataType, True) for f in fields]
                             + [StructField("_corrupt", StringType(), True)])
    df = (spark.read.schema(read_schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt")
          .json(files).withColumn("_file", F.input_file_name()).localCheckpoint(eager=False))
    is_bad = (F.col("_corrupt").isNotNull() | F.col("topic").isNull() | F.col("messageId").isNull()
              | F.col("storeTimestamp").isNull())
    # both counts in one job; the files with bad lines, when there are any, in another
    counts = df.agg(F.count_if(is_bad).alias("bad"), F.count_if(~is_bad).alias("good")).first()
    n_bad, n_good = counts["bad"], counts["good"]
    rejected = []
    if n_bad:
        bad_files = sorted(r["_file"] for r in df.where(is_bad).select("_file").distinct().collect())
        rejected = _bad_message_lines(bad_files, n_bad)
    if n_bad > len(rejected):
        rejected.append(RejectedLine(path, 0, f"... {n_bad - len(rejected)} more"))
    good = df.where(~is_bad).drop("_corrupt", "_file")
    # A line's own "priority" is the producer's: the transforms tell a given priority from a
    # decoder's default by headers.priority (segments carry the header), so set it from the field.
    given = F.create_map(F.lit("priority"), F.col("priority").cast("string"))
    good = good.withColumn("headers", F.when(F.col("priority").isNull() | F.col("headers")["priority"].isNotNull(),
                                             F.col("headers"))
                           .when(F.col("headers").isNull(), given)
                           .otherwise(F.map_concat(F.col("headers"), given)))
    return Loaded(good, n_good, rejected)


def message_files(path: str) -> list[str]:
    """The JSON-lines files of ``--messages``: the file, or a folder's ``*.json*`` files."""
    files = sorted(glob.glob(os.path.join(path, "*.json*"))) if os.path.isdir(path) else [path]
    if not files or not all(os.path.isfile(f) for f in files):
        raise InputError(f"messages: no such file: {path}")
    return files


#: Input files larger than this together are not counted line by line (:func:`small_input`): they
#: hold more rows than a small job has, unless each row is over 1.6 KiB.
COUNTED_BYTES = 16 << 20


def small_input(spark: SparkSession | None, settings: Settings, messages: str | None, events: list[str] | None,
                use_offsets: bool) -> bool:
    """Whether a replay reads at most ``session.SMALL_JOB_ROWS`` rows (messages, consumer events
    and offset snapshots): the lines of the files given, the rows of the lake's tables otherwise
    (counted from their Delta logs, until the limit is passed). False when it cannot tell: files
    of more than :data:`COUNTED_BYTES`, or a lake table to count and no session yet (the
    question is asked before the JVM starts too). Sizes the replay's JVM and jobs."""
    from msglake.pipelines.session import SMALL_JOB_ROWS

    files = (message_files(messages) if messages else []) + [f for f in events or [] if os.path.isfile(f)]
    if sum(os.path.getsize(f) for f in files) > COUNTED_BYTES:
        return False
    rows = 0
    for f in files:
        with open(f, "rb") as r:
            rows += r.read().count(b"\n")
    tables = ([] if messages else ["messages"]) + ([] if events else ["consumer_events"]) + (
        ["consumer_offsets"] if use_offsets and not messages else [])
    for name in (t for t in tables if in_lake(settings, t)):
        if spark is None or rows > SMALL_JOB_ROWS:
            return False
        rows += lake_table(spark, settings, name).count()
    return rows <= SMALL_JOB_ROWS


#: Bad input lines listed by name and number at most; the rest are counted.
LISTED_LINES = 20
REQUIRED_MESSAGE_FIELDS = ("topic", "messageId", "storeTimestamp")


def _bad_message_lines(uris: list[str], n_bad: int) -> list[RejectedLine]:
    """The first bad lines of the files Spark found bad rows in, with their numbers (Spark's JSON
    reader keeps none): read again in Python, only when there are bad rows. A line only Spark
    rejects (a value of the wrong type) is counted, not listed."""
    from urllib.parse import unquote, urlparse

    out: list[RejectedLine] = []
    for uri in uris:
        path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if len(out) >= min(n_bad, LISTED_LINES):
                    return out
                if not raw.strip():
                    continue
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError as e:
                    out.append(RejectedLine(path, n, f"not JSON: {e}"))
                    continue
                if not isinstance(rec, dict):
                    out.append(RejectedLine(path, n, "not a JSON object"))
                    continue
                missing = [k for k in REQUIRED_MESSAGE_FIELDS if rec.get(k) is None]
                if missing:
                    out.append(RejectedLine(path, n, f"missing {', '.join(missing)} (required: "
                                                     f"{', '.join(REQUIRED_MESSAGE_FIELDS)})"))
    return out


def default_as_of(messages: DataFrame) -> dt.datetime:
    """semantics.md §0: in a batch run, T defaults to the newest storeTimestamp of the input."""
    row = messages.select(F.unix_micros(F.max("storeTimestamp")).alias("t")).first()
    if row["t"] is None:
        raise InputError("no messages to replay (the input is empty)")
    return dt.datetime.fromtimestamp(0, dt.timezone.utc) + dt.timedelta(microseconds=row["t"])


def write_tables(spark: SparkSession, settings: Settings, result: Evaluation) -> dict[str, str]:
    """Replace this ``asOf``'s rows of ``message_states``, ``dead_letters`` and ``message_events``."""
    where = f"asOf = TIMESTAMP '{result.as_of.astimezone(dt.timezone.utc).isoformat()}'"
    out = {}
    for spec, df in ((MESSAGE_STATES_TABLE, result.states), (DEAD_LETTERS_TABLE, result.dead_letters),
                     (MESSAGE_EVENTS_TABLE, result.events)):
        path = ensure_table(spark, settings, spec)
        (df.select(*spec.schema.names).write.format("delta").mode("overwrite").option("replaceWhere", where)
         .save(path))
        out[spec.name] = path
    register_tables(spark, settings)  # the views over the new tables
    return out


def write_json(result: Evaluation, out_dir: str) -> dict[str, str]:
    """One sorted JSON-lines file per output: ``<out_dir>/<name>.jsonl``, the same bytes for the same input."""
    os.makedirs(out_dir, exist_ok=True)
    out = {}
    for name, df in (("message_states", result.states), ("dead_letters", result.dead_letters),
                     ("message_events", result.events)):
        tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir)
        try:
            (df.repartition(1).sortWithinPartitions(*JSON_OUTPUTS[name]).write.mode("overwrite")
             .option("timestampFormat", TIMESTAMP_FORMAT).option("ignoreNullFields", "false").json(tmp))
            parts = sorted(glob.glob(os.path.join(tmp, "part-*")))
            target = os.path.join(out_dir, f"{name}.jsonl")
            with open(target, "wb") as w:
                for p in parts:
                    with open(p, "rb") as r:
                        shutil.copyfileobj(r, w)
            out[name] = target
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def summarize(result: Evaluation) -> list[str]:
    """Counts by state and reason (a few numbers, computed in one pass)."""
    rows = (result.states.groupBy("state", "stateReason").agg(F.count(F.lit(1)).alias("n"))
            .orderBy("state", "stateReason").collect())
    total = sum(r["n"] for r in rows)
    lines = [f"{total:,} message copies as of {result.as_of.isoformat()} "
             f"({result.rounds} round(s){'' if result.converged else ', NOT converged: raise --max-hops'})"]
    for r in rows:
        why = f" ({r['stateReason']})" if r["stateReason"] else ""
        lines.append(f"  {r['state']}{why}: {r['n']:,}")
    return lines


def in_lake(settings: Settings, name: str) -> bool:
    """Whether the lake has the table ``name`` yet."""
    return os.path.isdir(os.path.join(settings.lake.table_path(name), "_delta_log"))


def lake_table(spark: SparkSession, settings: Settings, name: str) -> DataFrame | None:
    """The lake's table ``name``, or None when it does not exist yet."""
    return spark.read.format("delta").load(settings.lake.table_path(name)) if in_lake(settings, name) else None


@dataclass
class ReplayRun:
    """What one replay did: its evaluation, where it wrote, and the input lines it could not use."""

    result: Evaluation
    outputs: dict[str, str]
    rejected: list[RejectedLine]
    seconds: float
    #: :func:`summarize`'s lines.
    summary: list[str]

    def lines(self) -> list[str]:
        out = list(self.summary)
        out += [f"  input line not used: {r.file}:{r.line}: {r.reason}" for r in self.rejected]
        out += [f"  {name:<15} {path}" for name, path in self.outputs.items()]
        return out + [f"replay took {self.seconds:.1f}s"]


def run_replay(spark: SparkSession, settings: Settings, *, as_of: dt.datetime | None = None,
               messages: str | None = None, policies: str | None = None, events: list[str] | None = None,
               use_offsets: bool = True, json_out: str | None = None, max_hops: int | None = None) -> ReplayRun:
    """Evaluate the delivery rules as of ``as_of`` over the lake's tables, or over files where given.

    ``messages``: JSON lines in the unified schema; ``policies``: a policies YAML; ``events``:
    consumer-event JSON lines (each instead of the lake's table or the settings' policies).
    Writes the replay tables, or JSON lines to ``json_out``.
    """
    from msglake.pipelines.session import sized_for

    started = time.monotonic()
    chosen_policies = load_policies(policies) if policies else policies_of(settings)
    with sized_for(spark, small_input(spark, settings, messages, events, use_offsets)):
        result, outputs, rejected = _replay(spark, settings, as_of, messages, chosen_policies, events, use_offsets,
                                            json_out, max_hops)
        summary = summarize(result)
    return ReplayRun(result, outputs, rejected, time.monotonic() - started, summary)


def _replay(spark: SparkSession, settings: Settings, as_of: dt.datetime | None, messages: str | None,
            policies: dict[str, dict], events: list[str] | None, use_offsets: bool, json_out: str | None,
            max_hops: int | None) -> tuple[Evaluation, dict[str, str], list[RejectedLine]]:
    """:func:`run_replay`'s inputs read, evaluated and written."""
    from msglake.pipelines.jobs.evaluate import evaluate
    from msglake.transforms.lifecycle import DEFAULT_MAX_HOPS

    rejected: list[RejectedLine] = []
    if messages:
        loaded = read_messages_json(spark, messages)
        messages_df, rejected = loaded.df, loaded.rejected
    else:
        messages_df = lake_table(spark, settings, "messages")
        if messages_df is None:
            raise LakeError(f"no messages table in {settings.lake.table_path('messages')}: "
                            "ingest first, or replay messages from a JSON-lines file")
    if events:
        loaded = read_consumer_events(spark, events, messages_df)
        events_df, rejected = loaded.df, rejected + loaded.rejected
    else:
        events_df = lake_table(spark, settings, "consumer_events")
    offsets = lake_table(spark, settings, "consumer_offsets") if use_offsets and not messages else None
    as_of = as_of or default_as_of(messages_df)
    result = evaluate(messages_df, policies, as_of, consumer_events=events_df, consumer_offsets=offsets,
                      max_hops=DEFAULT_MAX_HOPS if max_hops is None else max_hops)
    outputs = write_json(result, json_out) if json_out else write_tables(spark, settings, result)
    return result, outputs, rejected
