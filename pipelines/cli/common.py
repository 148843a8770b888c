"""What every ``msglake`` subcommand shares: the common options, settings, output and errors.

Errors reach the user as one line (two where Spark adds its error class), never as a stack
trace unless ``--verbose``: a :class:`~msglake.errors.MsglakeError` says what is wrong and what
to do and sets the exit status; a Spark error is shown by its error class and first line;
anything else is an internal error, named by its type, with the traceback behind ``--verbose``.
Spark's own log lines go to ``<lake>/_logs/`` (:mod:`msglake.pipelines.session`), Python's
``logging`` warnings to stderr as ``msglake: warning: ...``.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable

from msglake.errors import ConfigError, describe

LOG = logging.getLogger("msglake")


def common_options() -> argparse.ArgumentParser:
    """The options every command that reads settings takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--conf", metavar="FILE", default=os.environ.get("MSGLAKE_CONF"),
                        help="settings YAML laid over the embedded default key by key (env MSGLAKE_CONF; "
                             "a conf/local/msglake.yaml in the current folder is laid over first)")
    common.add_argument("--master", metavar="URL", default=os.environ.get("MSGLAKE_SPARK_MASTER"),
                        help="Spark master, e.g. local[2] or spark://host:7077 (env MSGLAKE_SPARK_MASTER; "
                             "default from settings: spark.master)")
    common.add_argument("--lake", metavar="DIR", default=os.environ.get("MSGLAKE_LAKE_ROOT"),
                        help="lake root folder holding the Delta tables (env MSGLAKE_LAKE_ROOT; "
                             "default from settings: lake.root). Spark's own output (JVM and worker log lines) goes to "
                             "DIR/_logs/spark.log, or to msglake-logs/ in the system temp folder while DIR does not "
                             "exist or is read-only")
    add_verbose(common)
    return common


def add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", "-v", action="store_true",
                   help="show the stack trace of an error and msglake's own debug messages")


def load_settings(args):
    """The settings of a command: the embedded default, ``--conf``, then ``--lake``/``--master``."""
    from msglake.pipelines import settings as S

    env = dict(os.environ)
    if getattr(args, "lake", None):
        env["MSGLAKE_LAKE_ROOT"] = args.lake
    if getattr(args, "master", None):
        env["MSGLAKE_SPARK_MASTER"] = args.master
    return S.load(args.conf, env=env)


def emit(lines: Iterable[str]) -> None:
    """Print lines to stdout as they come (a long job's summary should not wait in a buffer)."""
    for line in lines:
        print(line, flush=True)


def served(reply: dict) -> int:
    """Print what ``msglake serve`` answered for a command (``{status, out | err}``, ``err`` as
    :func:`msglake.errors.describe` words it) as the command prints it in-process; its exit status."""
    if reply["status"]:
        print(f"msglake: {reply['err']}", file=sys.stderr)
    else:
        sys.stdout.write(reply["out"])
    return reply["status"]


def parse_time(text: str, option: str):
    """A time given on the command line: ISO-8601 (UTC when it has no zone) or epoch milliseconds.

    >>> parse_time("2026-11-01T10:00:00Z", "--as-of").isoformat()
    '2026-11-01T10:00:00+00:00'
    >>> parse_time("1762000000000", "--as-of").isoformat()
    '2025-11-01T12:26:40+00:00'
    """
    import datetime as dt

    try:
        if text.isdigit():
            return dt.datetime.fromtimestamp(int(text) / 1000, dt.timezone.utc)
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{option}: not a time: {text!r} (ISO-8601 like 2026-11-01T10:00:00Z, or epoch ms)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def non_negative(value: int, option: str) -> int:
    if value < 0:
        raise ConfigError(f"{option}: must be 0 or more (got {value})")
    return value


def _setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("msglake: %(levelname)s: %(message)s"))
    LOG.handlers[:] = [handler]
    LOG.setLevel(logging.DEBUG if verbose else logging.WARNING)
    LOG.propagate = False
    # py4j logs every callback-server connection at INFO: not a user's concern.
    logging.getLogger("py4j").setLevel(logging.ERROR)


def run(handler: Callable, args) -> int:
    """Run one command; every error ends here, as one line and an exit status."""
    verbose = getattr(args, "verbose", False)
    _setup_logging(verbose)
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("msglake: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the one place that turns every error into a line for the user
        if verbose:
            traceback.print_exc()
        status, line = describe(e)
        if line.startswith("internal error") and not verbose:
            line += " (run again with --verbose for the stack trace)"
        print(f"msglake: {line}", file=sys.stderr)
        return status
