"""``msglake serve``: one warm Spark session answering read-only SQL over Arrow Flight SQL.

A query run in a fresh process pays for the JVM and the session (~10 s) before its first row;
the server pays once. It listens on 127.0.0.1 only and speaks two things:

- **Flight SQL** statement queries (``CommandStatementQuery`` -> ``GetFlightInfo``, then
  ``DoGet``), what the ADBC Flight SQL driver, JDBC/ODBC Flight SQL drivers and BI tools send;
- the action ``msglake.sql`` (``{"sql", "format", "limit"}`` -> the rendered text), which
  ``msglake sql`` uses, so its output is the same as when it runs in-process.

Every statement goes through :func:`msglake.pipelines.jobs.sql.run_sql` in read-only mode: the
server sees the statement text and checks it like the command does. Writes (``DoPut``,
update commands, prepared statements) are not implemented, so they fail.

The server records where it listens in ``<lake>/_server.json`` (removed when it stops), which
is how ``msglake sql`` finds it.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from pathlib import Path

import pyarrow.flight as flight

from msglake.errors import MsglakeError, spark_message
from msglake.pipelines.io import flightsql
from msglake.pipelines.settings import Settings

LOG = logging.getLogger(__name__)

#: The action ``msglake sql`` sends.
SQL_ACTION = "msglake.sql"


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
                ("CreatePreparedStatement", "Flight SQL: check a read-only query and keep it under a handle"),
                ("ClosePreparedStatement", "Flight SQL: forget a prepared query")]

    def do_action(self, context, action):
        body = action.body.to_pybytes()
        if action.type == SQL_ACTION:
            yield flight.Result(json.dumps(self._render(json.loads(body))).encode())
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

    def _render(self, request: dict) -> dict:
        """``msglake sql``'s request: the rendered result, or the error as the command prints it."""
        from msglake.pipelines.jobs.sql import render

        try:
            out = render(self._run(request["sql"]), request.get("format", "table"), int(request.get("limit", 1000)))
            return {"status": 0, "out": out}
        except MsglakeError as e:
            return {"status": e.exit_code, "err": str(e)}
        except Exception as e:
            return {"status": 1, "err": f"Spark error: {spark_message(e)}"}


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


def query_server(uri: str, sql: str, fmt: str, limit: int, timeout: float = 600.0) -> dict | None:
    """Run ``sql`` on the server at ``uri``: its reply ``{status, out | err}``, or None when the
    server cannot be reached (the caller then runs the query itself)."""
    client = flight.FlightClient(uri)
    body = json.dumps({"sql": sql, "format": fmt, "limit": limit}).encode()
    try:
        options = flight.FlightCallOptions(timeout=timeout)
        [result] = list(client.do_action(flight.Action(SQL_ACTION, body), options))
        return json.loads(result.body.to_pybytes())
    except flight.FlightUnavailableError:
        return None
    finally:
        client.close()
