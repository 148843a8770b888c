"""``msglake serve``: one warm Spark session answering read-only SQL over Arrow Flight SQL.

A query run in a fresh process pays for the JVM and the session (~10 s) before its first row;
the server pays once. It listens on 127.0.0.1 only and speaks three things:

- **Flight SQL** statement queries (``CommandStatementQuery`` -> ``GetFlightInfo``, then
  ``DoGet``), what the ADBC Flight SQL driver, JDBC/ODBC Flight SQL drivers and BI tools send;
- the action ``msglake.sql`` (``{"sql", "format", "limit"}`` -> the rendered text), which
  ``msglake sql`` uses, so its output is the same as when it runs in-process;
- the action ``msglake.history`` (``msglake history``'s options and the client's policies ->
  the rendered story), which ``msglake history`` uses the same way: a lookup in the warm session
  takes the evaluation alone, without the JVM start and the first run's warm-up.

Every statement goes through :func:`msglake.pipelines.jobs.sql.run_sql` in read-only mode: the
server sees the statement text and checks it like the command does. Writes (``DoPut``,
update commands, prepared statements) are not implemented, so they fail. A history lookup
reads the lake's tables and writes nothing; its request's fields are checked one by one.

The server records where it listens in ``<lake>/_server.json`` (removed when it stops), which
is how ``msglake sql`` and ``msglake history`` find it.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from pathlib import Path

import pyarrow.flight as flight

from msglake.errors import ConfigError, MsglakeError, describe, spark_message
from msglake.pipelines.io import flightsql
from msglake.pipelines.settings import Settings

LOG = logging.getLogger(__name__)

#: The action ``msglake sql`` sends.
SQL_ACTION = "msglake.sql"
#: The action ``msglake history`` sends.
HISTORY_ACTION = "msglake.history"


def endpoint_file(settings: Settings) -> Path:
    return Path(settings.lake.root).resolve() / "_server.json"


class QueryServer(flight.FlightServerBase):
    """Flight SQL over one SparkSession, read-only (see the module docstring)."""

    def __init__(self, spark, settings: Settings, port: int = 0):
        super().__init__(f"grpc://127.0.0.1:{port}")
        self.spark = spark
        self.settings = settings
        self._pending: dict[bytes, tuple] = {}  # statement handle -> (DataFrame, Arrow schema), until DoGet
        self._prepared: dict[bytes, str] = {}  # prepared statement handle -> its (checked) SQL
        self._lock = threading.Lock()
        self._tables: set[str] = set()
        self._read_only = None  # the read-only session queries run in, made again when tables appear
        #: Statements received, refused ones included.
        self.statements = 0
        #: History requests received, refused ones included.
        self.lookups = 0

    # -- what every request does --------------------------------------------------------------
    def _session(self):
        """The read-only session queries run in, made again when a table appeared under the lake
        since the last request (an ingest or a replay may have made it): a folder check, cheap
        enough for every request."""
        from msglake.pipelines.io.catalog import register_tables
        from msglake.pipelines.jobs.readonly import read_only_session
        from msglake.schemas import TABLE_NAMES

        have = {t for t in TABLE_NAMES if Path(self.settings.lake.table_path(t), "_delta_log").is_dir()}
        with self._lock:
            if have != self._tables or self._read_only is None:
                register_tables(self.spark, self.settings)
                self._read_only = read_only_session(self.spark)
                self._tables = have
            return self._read_only

    def _run(self, sql: str):
        from msglake.pipelines.jobs.sql import run_sql

        self.statements += 1
        return run_sql(self.spark, sql, read_only=self._session())

    @staticmethod
    def _error(e: Exception) -> flight.FlightError:
        if isinstance(e, MsglakeError):
            return flight.FlightServerError(str(e))
        return flight.FlightServerError(f"query failed: {spark_message(e)}")

    # -- Flight SQL ----------------------------------------------------------------------------
    def get_flight_info(self, context, descriptor):
        type_url, _ = flightsql.unpack(descriptor.command or b"")
        if type_url == flightsql.STATEMENT_QUERY:
            sql = flightsql.first_field(descriptor.command, type_url).decode()
        elif type_url == flightsql.PREPARED_STATEMENT_QUERY:
            with self._lock:
                sql = self._prepared.get(flightsql.first_field(descriptor.command, type_url))
            if sql is None:
                raise flight.FlightServerError("unknown prepared statement (closed, or made by another server)")
        else:
            raise flight.FlightServerError(
                f"not supported by the msglake query server: {type_url.rsplit('.', 1)[-1] or 'a path descriptor'} "
                "(queries only; it is read-only)")
        df, schema = self._checked(sql)
        handle = uuid.uuid4().bytes
        with self._lock:
            self._pending[handle] = (df, schema)
        endpoint = flight.FlightEndpoint(flightsql.ticket(handle), [])
        return flight.FlightInfo(schema, descriptor, [endpoint], -1, -1)

    def _checked(self, sql: str):
        """The DataFrame of ``sql`` and its Arrow schema, once the read-only checks passed."""
        from pyspark.sql.pandas.types import to_arrow_schema

        try:
            df = self._run(sql)
            return df, to_arrow_schema(df.schema, timezone="UTC")  # sessions run in UTC
        except Exception as e:  # every failure reaches the client as one message
            LOG.info("refused or failed: %s", e)
            raise self._error(e) from None

    def do_get(self, context, ticket):
        try:
            handle = flightsql.first_field(ticket.ticket, flightsql.TICKET_STATEMENT_QUERY)
        except ValueError as e:
            raise flight.FlightServerError(str(e)) from None
        with self._lock:
            pending = self._pending.pop(handle, None)
        if pending is None:
            raise flight.FlightServerError("unknown or already used ticket: ask GetFlightInfo again")
        df, schema = pending
        try:
            table = df.toArrow()
        except Exception as e:
            raise self._error(e) from None
        if table.schema != schema:  # the schema GetFlightInfo announced is the one the stream carries
            table = table.cast(schema)
        return flight.RecordBatchStream(table)

    # -- msglake's own client -----------------------------------------------------------------
    def list_actions(self, context):
        return [(SQL_ACTION, "run one read-only statement; body {sql, format, limit}; result {status, out, err}"),
                (HISTORY_ACTION, "one message's story; body {id, asOf, topic, partition, maxHops, format, "
                                 "policies}; result {status, out, err}"),
                ("CreatePreparedStatement", "Flight SQL: check a read-only query and keep it under a handle"),
                ("ClosePreparedStatement", "Flight SQL: forget a prepared query")]

    def do_action(self, context, action):
        body = action.body.to_pybytes()
        if action.type == SQL_ACTION:
            yield flight.Result(json.dumps(self._render(body)).encode())
        elif action.type == HISTORY_ACTION:
            yield flight.Result(json.dumps(self._history(body)).encode())
        elif action.type == "CreatePreparedStatement":
            # Statements are checked when prepared, so a refused one fails here, before any handle exists.
            sql = flightsql.first_field(body, flightsql.CREATE_PREPARED_REQUEST).decode()
            _, schema = self._checked(sql)
            handle = uuid.uuid4().bytes
            with self._lock:
                self._prepared[handle] = sql
            yield flight.Result(flightsql.prepared_result(handle, schema.serialize().to_pybytes()))
        elif action.type == "ClosePreparedStatement":
            with self._lock:
                self._prepared.pop(flightsql.first_field(body, flightsql.CLOSE_PREPARED_REQUEST), None)
        else:
            raise flight.FlightServerError(f"not supported by the msglake query server: {action.type} "
                                           "(queries only; it is read-only)")

    def _render(self, body: bytes) -> dict:
        """``msglake sql``'s request: the rendered result, or the error as the command prints it."""
        from msglake.pipelines.jobs.sql import render

        try:
            request = _request(body, "sql request")
            out = render(self._run(request["sql"]), request.get("format", "table"), int(request.get("limit", 1000)))
            return {"status": 0, "out": out}
        except Exception as e:
            return _failed(e)

    def _history(self, body: bytes) -> dict:
        """``msglake history``'s request: the story as the command prints it, or the error. The
        lake is the one served; the policies are the client's (its settings may differ from the
        server's), checked here like a settings file's."""
        from msglake.pipelines.jobs.history import history, render_json, render_text

        self.lookups += 1
        try:
            ask = history_request(body)
            story = history(self.spark, self.settings, ask["id"], as_of=ask["as_of"], topic=ask["topic"],
                            partition=ask["partition"], max_hops=ask["max_hops"], policies=ask["policies"])
            lines = render_json(story) if ask["format"] == "json" else render_text(story)
            return {"status": 0, "out": "".join(line + "\n" for line in lines)}
        except Exception as e:
            return _failed(e)


def _failed(e: Exception) -> dict:
    """A request's error as its command prints it: ``{status, err}`` (:func:`msglake.errors.describe`)."""
    status, line = describe(e)
    return {"status": status, "err": line}


#: Bounds of a history request's numbers: a hop limit beyond any real chain (a cycle of
#: dead-letter topics would otherwise keep the shared session busy a round per hop), a partition.
MAX_HOPS_SERVED = 1000
MAX_PARTITION = (1 << 31) - 1


def _request(body: bytes, what: str) -> dict:
    """An action's body: a JSON object, else a ConfigError naming ``what``."""
    try:
        request = json.loads(body)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        raise ConfigError(f"{what}: not a JSON object")
    return request


def history_request(body: bytes) -> dict:
    """The arguments of a ``msglake.history`` request, checked: it comes over a socket, so
    every field is taken only as the type the command gives it, within bounds."""
    import datetime as dt

    from msglake.pipelines.settings import checked_policies

    request = _request(body, "history request")

    def field(name, kinds, default=None, required=False):
        value = request.get(name, default)
        if (value is None and required) or (value is not None and (type(value) not in kinds)):
            raise ConfigError(f"history request: {name}: expected {' or '.join(k.__name__ for k in kinds)}")
        return value

    wanted = field("id", (str,), required=True)
    as_of = field("asOf", (str,))
    partition = field("partition", (int,))
    max_hops = field("maxHops", (int,), required=True)
    fmt = field("format", (str,), "text")
    if fmt not in ("text", "json"):
        raise ConfigError("history request: format: text or json")
    if not 0 <= max_hops <= MAX_HOPS_SERVED or (partition is not None and not 0 <= partition <= MAX_PARTITION):
        raise ConfigError(f"history request: maxHops must be 0..{MAX_HOPS_SERVED:,}, partition 0..{MAX_PARTITION:,}")
    try:
        as_of = None if as_of is None else dt.datetime.fromisoformat(as_of)
    except ValueError:
        raise ConfigError(f"history request: asOf: not an ISO-8601 time: {as_of!r}") from None
    if as_of is not None and as_of.tzinfo is None:
        raise ConfigError("history request: asOf: give a zone")
    policies = checked_policies(field("policies", (dict,), {}), "history request")
    return {"id": wanted, "as_of": as_of, "topic": field("topic", (str,)), "partition": partition,
            "max_hops": max_hops, "format": fmt, "policies": policies}


def serve(spark, settings: Settings, port: int = 0, ready=None) -> None:
    """Serve until SIGINT/SIGTERM (or ``shutdown()``); ``ready(server)`` is called once it listens."""
    server = QueryServer(spark, settings, port)
    server._session()
    record = endpoint_file(settings)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"uri": f"grpc://127.0.0.1:{server.port}", "pid": os.getpid(),
                               "lake": str(Path(settings.lake.root).resolve())}))
    os.replace(tmp, record)
    try:
        if ready is not None:
            ready(server)
        server.serve()
    finally:
        record.unlink(missing_ok=True)
        server.shutdown()


def find_server(settings: Settings) -> str | None:
    """The URI of the server of this lake, if one runs (its record is there and its process lives)."""
    try:
        doc = json.loads(endpoint_file(settings).read_text())
        os.kill(int(doc["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return doc.get("uri")


def ask_server(uri: str, action: str, request: dict, timeout: float = 600.0) -> dict | None:
    """Send one of msglake's actions to the server at ``uri``: its reply ``{status, out | err}``,
    or None when the server cannot be reached or does not know the action (one started by an
    older msglake): the caller then does the work itself."""
    client = flight.FlightClient(uri)
    body = json.dumps(request).encode()
    try:
        options = flight.FlightCallOptions(timeout=timeout)
        [result] = list(client.do_action(flight.Action(action, body), options))
        return json.loads(result.body.to_pybytes())
    except flight.FlightUnavailableError:
        return None
    except flight.FlightServerError as e:
        if f"not supported by the msglake query server: {action}" in str(e):
            return None
        raise
    finally:
        client.close()
