"""The errors msglake raises on purpose, one hierarchy for every package.

Each message says what is wrong and, where it can, what to do; the ``msglake`` command prints
it as one line and exits with :attr:`MsglakeError.exit_code`. Library code raises these and
never names a command-line flag: the CLI knows which flag fed which value.
"""
from __future__ import annotations


class MsglakeError(Exception):
    """Base class: an error a user can act on (bad settings, bad input, a refused query...)."""

    #: Exit status of the ``msglake`` command for this error.
    exit_code = 2


class ConfigError(MsglakeError, ValueError):
    """Settings or options that cannot be used; the message names the key."""


class SetupError(MsglakeError):
    """The machine lacks something msglake needs (the Delta jars, a native build)."""


class InputError(MsglakeError, ValueError):
    """An input (segment folder, JSON-lines file, time value) that cannot be used at all."""


class LakeError(MsglakeError):
    """The lake root or one of its tables cannot be used as asked (missing, read-only, not a folder)."""


class QueryRefused(MsglakeError):
    """A SQL statement read-only mode does not allow; nothing of it ran."""


class QueryError(MsglakeError):
    """A SQL statement Spark could not parse or analyse (a syntax error, an unknown table or column)."""


class QualityRuleFailed(MsglakeError):
    """A fail-level quality rule matched rows of a micro-batch; nothing of the batch was written."""

    exit_code = 3


class JobError(MsglakeError):
    """A Spark job or query failed; the message is Spark's error class and first line."""

    exit_code = 1


def spark_message(e: BaseException) -> str:
    """A Spark error as one line: its error class and message, without the JVM stack trace.

    Duck-typed on ``getCondition`` so this module imports nothing of pyspark.
    """
    cls = e.getCondition() if hasattr(e, "getCondition") else None
    text = " ".join(str(e).split("\n\nJVM stacktrace:")[0].split()) or type(e).__name__
    if cls and text.startswith(f"[{cls}]"):
        text = text[len(cls) + 2:].strip()
    return f"{cls}: {text}" if cls else text


def spark_error(e: BaseException) -> str | None:
    """One or two lines for an error that came from Spark, or None if it did not."""
    try:
        from py4j.protocol import Py4JJavaError
        from pyspark.errors import PySparkException
    except ImportError:
        return None
    if isinstance(e, PySparkException):
        return spark_message(e)
    if isinstance(e, Py4JJavaError):
        java = e.java_exception
        return f"{java.getClass().getSimpleName()}: {' '.join(str(java.getMessage()).split())}"
    return None


def describe(e: Exception) -> tuple[int, str]:
    """An error as a command reports it: (exit status, the line after ``msglake: ``). Used by the
    command itself and by ``msglake serve`` answering for one, so both print the same."""
    if isinstance(e, MsglakeError):
        return e.exit_code, f"error: {e}"
    spark = spark_error(e)
    if spark is not None:
        return 1, f"Spark error: {spark[:2000]}"
    return 1, f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:500]}"
