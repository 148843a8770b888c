"""Expectation suites of the data-quality reports, defined in code (great-expectations 1.x).

A suite checks one lake table. Row rules (quality/rules.py) are reused, not restated: each
active rule becomes a helper column holding its reason (null when the row passes) and an
``expect_column_values_to_be_null`` on it. Structural checks (keys, required columns, value
sets) use the stock expectations. Every check has a level: ``error`` (great-expectations'
``critical`` severity; a failure makes ``msglake quality`` exit non-zero) or ``warning``.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, functions as F

from msglake.quality import rules as R
from msglake.schemas.semantics import REASONS, STATES

TABLES = ("messages", "dead_letters", "quarantine")

#: Columns that locate a failing row in the report's samples.
SAMPLE_COLUMNS = {
    "messages": ["topic", "partition", "segment", "segmentPosition", "messageId"],
    "dead_letters": ["topic", "rowId", "uniqueId", "hop"],
    "quarantine": ["sourceFormat", "topic", "partition", "segment", "segmentPosition"],
}

#: The time column ``--since`` filters on, per table.
TIME_COLUMN = {"messages": "ingestedAt", "dead_letters": "storeTimestamp", "quarantine": "quarantinedAt"}

#: Rule levels of the ingest stream -> report level. A quarantine- or fail-level rule should
#: never match a row in ``messages``: finding one there is an error.
_REPORT_LEVEL = {"warn": "warning", "quarantine": "error", "fail": "error"}

_DEATH_REASONS = ("expired", "rejected", "maxlen", "delivery_limit")


@dataclass(frozen=True)
class Check:
    """One expectation: ``kind`` is the great-expectations class name, ``kwargs`` its arguments."""

    name: str
    level: str
    description: str
    kind: str
    kwargs: dict = field(default_factory=dict)

    @property
    def column(self) -> str | None:
        return self.kwargs.get("column") or self.kwargs.get("column_A")


def _rule_column(name: str) -> str:
    return f"rule_{name}"


def prepare(table: str, df: DataFrame, rules: R.RuleContext, levels: dict[str, str]) -> DataFrame:
    """``df`` with the helper columns its suite checks (rule reasons, lengths, first death)."""
    if table == "messages":
        helpers: dict[str, Column] = {_rule_column(n): R.RULES[n].check(rules) for n in R.active(levels)}
        helpers["bodyLength"] = F.length("body")
    elif table == "dead_letters":
        helpers = {"deaths": F.size("deathHistory"), "lastDeathReason": F.get(F.col("deathHistory"), 0)["reason"]}
    elif table == "quarantine":
        helpers = {"rawLength": F.length("rawBytes").cast("bigint")}
    else:
        raise ValueError(f"no quality suite for table {table!r}; known: {', '.join(TABLES)}")
    return df.withColumns(helpers)


def checks(table: str, levels: dict[str, str]) -> list[Check]:
    """The suite of ``table``: its checks, in report order."""
    if table == "messages":
        out = [
            Check("has_rows", "warning", "the table (or the --since window) has rows",
                  "ExpectTableRowCountToBeBetween", {"min_value": 1}),
            Check("key_unique", "error", "one row per stored record (sourceFormat, topic, partition, segment, position)",
                  "ExpectCompoundColumnsToBeUnique",
                  {"column_list": ["sourceFormat", "topic", "partition", "segment", "segmentPosition"]}),
            *[Check(f"{c}_present", "error", f"{c} is set", "ExpectColumnValuesToNotBeNull", {"column": c})
              for c in ("messageId", "storeTimestamp", "topic")],
            Check("source_format", "error", "sourceFormat is a known format", "ExpectColumnValuesToBeInSet",
                  {"column": "sourceFormat", "value_set": ["nsq_ext", "rocketmq_commitlog"]}),
            Check("body_size", "error", "bodySize equals the stored body's length", "ExpectColumnPairValuesToBeEqual",
                  {"column_A": "bodySize", "column_B": "bodyLength"}),
            Check("message_type", "warning", "messageType is NORMAL, FIFO, DELAY or TRANSACTION (or not given)",
                  "ExpectColumnValuesToBeInSet",
                  {"column": "messageType", "value_set": ["NORMAL", "FIFO", "DELAY", "TRANSACTION"]}),
        ]
        for name, level in R.active(levels).items():
            rule = R.RULES[name]
            out.append(Check(name, _REPORT_LEVEL[level], f"row rule: {rule.description} (ingest level {level})",
                             "ExpectColumnValuesToBeNull", {"column": _rule_column(name)}))
        return out
    if table == "dead_letters":
        return [
            Check("has_rows", "warning", "the table (or the --since window) has rows",
                  "ExpectTableRowCountToBeBetween", {"min_value": 1}),
            Check("copy_unique", "error", "one row per copy and evaluation (asOf, rowId)",
                  "ExpectCompoundColumnsToBeUnique", {"column_list": ["asOf", "rowId"]}),
            Check("hop", "error", "a dead-lettered copy is at hop 1 or more", "ExpectColumnValuesToBeBetween",
                  {"column": "hop", "min_value": 1}),
            Check("parent", "error", "every copy links to the copy it came from", "ExpectColumnValuesToNotBeNull",
                  {"column": "parentRowId"}),
            Check("history", "error", "the x-death history has an entry per death", "ExpectColumnValuesToBeBetween",
                  {"column": "deaths", "min_value": 1}),
            Check("death_reason", "error", "the newest death has a dead-letter reason", "ExpectColumnValuesToBeInSet",
                  {"column": "lastDeathReason", "value_set": list(_DEATH_REASONS)}),
            Check("state", "error", "state is one of the lifecycle states", "ExpectColumnValuesToBeInSet",
                  {"column": "state", "value_set": list(STATES)}),
            Check("state_reason", "error", "stateReason is a known reason", "ExpectColumnValuesToBeInSet",
                  {"column": "stateReason", "value_set": list(REASONS)}),
        ]
    if table == "quarantine":
        return [
            Check("reason_present", "error", "every quarantined record says why", "ExpectColumnValuesToNotBeNull",
                  {"column": "reason"}),
            Check("raw_bytes_kept", "error", "the record's bytes are kept whole (lost bytes: deleted segments)",
                  "ExpectColumnPairValuesToBeEqual", {"column_A": "recordLength", "column_B": "rawLength"}),
            Check("position", "error", "segmentPosition is a file position", "ExpectColumnValuesToBeBetween",
                  {"column": "segmentPosition", "min_value": 0}),
            Check("source_format", "error", "sourceFormat is a known format", "ExpectColumnValuesToBeInSet",
                  {"column": "sourceFormat", "value_set": ["nsq_ext", "rocketmq_commitlog"]}),
            Check("held_by_rule", "warning", "decoded messages a quality rule moved here (rule is set)",
                  "ExpectColumnValuesToBeNull", {"column": "rule"}),
        ]
    raise ValueError(f"no quality suite for table {table!r}; known: {', '.join(TABLES)}")


def great_expectations(module: str = "great_expectations"):
    """``module`` of great-expectations, imported here (the library takes seconds to load) so that
    it also loads where ``__main__`` has neither a spec nor a file (``python -c``, pytest-xdist's
    workers, an embedding host): great-expectations imports pyspark.sql.connect, which then takes
    itself for pyspark's own doctest run and ends the process with exit status 0. Marked as an
    interactive session for that import, it checks its own dependencies instead and raises the
    ImportError great-expectations expects when Spark Connect's are missing."""
    if "great_expectations" not in sys.modules and not hasattr(sys, "ps1"):
        sys.ps1 = ""
        try:
            importlib.import_module("great_expectations")
        finally:
            del sys.ps1
    return importlib.import_module(module)


def expectation(check: Check):
    """The great-expectations object of ``check``."""
    gxe = great_expectations("great_expectations.expectations")
    FailureSeverity = great_expectations("great_expectations.expectations.metadata_types").FailureSeverity

    severity = FailureSeverity.CRITICAL if check.level == "error" else FailureSeverity.WARNING
    kind = getattr(gxe, check.kind)
    return kind(**check.kwargs, severity=severity, meta={"name": check.name, "level": check.level,
                                                        "description": check.description})
