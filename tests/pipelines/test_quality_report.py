"""msglake quality: great-expectations suites over the lake tables, JSON + self-contained HTML, history table."""
from __future__ import annotations

import datetime as dt
import json
import re

import pytest
import yaml
from pyspark.sql import functions as F

from msglake.pipelines import cli
from msglake.pipelines.jobs.quality import run_quality
from msglake.quality import rules as R, suites

pytestmark = pytest.mark.slow

T = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def messages_run(spark, replayed, tmp_path_factory):
    settings, _, _ = replayed
    return run_quality(spark, settings, "messages", out_dir=str(tmp_path_factory.mktemp("reports")), evaluated_at=T)


def test_report_json_counts_what_an_independent_query_counts(spark, replayed, messages_run):
    settings, _, _ = replayed
    messages = spark.read.format("delta").load(settings.lake.table_path("messages"))
    with open(messages_run.json_path) as f:
        doc = json.load(f)
    assert doc["runId"] == "20261123T120000000000Z-messages" and doc["rows"] == messages.count()
    results = {r["name"]: r for r in doc["results"]}
    checks = suites.checks("messages", settings.quality.levels())
    assert list(results) == [c.name for c in checks]
    # Each result is its own check's (great-expectations returns them grouped by column, not in order).
    for c in checks:
        assert (results[c.name]["column"], results[c.name]["expectation"]) == (
            c.column, re.sub(r"(?<!^)([A-Z])", r"_\1", c.kind).lower()), c.name
    # The sample generators wrote one message breaking each of these (kept: warn level at ingest).
    for rule in ("priority_range", "expire_before_born", "store_before_born"):
        assert (results[rule]["success"], results[rule]["unexpected"], results[rule]["level"]) == (False, 1, "warning")
    bad_uniq = messages.where((F.col("sourceFormat") == "rocketmq_commitlog")
                              & ~F.col("uniqueId").rlike(R.ROCKETMQ_ID)).count()
    assert bad_uniq > 0 and results["malformed_id"]["unexpected"] == bad_uniq
    [sample] = results["priority_range"]["samples"]
    assert sample["topic"] == "orders" and sample["rule_priority_range"] == "priority 15 outside 1..10"
    assert {"partition", "segment", "segmentPosition", "messageId"} <= set(sample)
    assert all(results[n]["success"] for n in ("key_unique", "messageId_present", "body_size", "source_format"))
    assert doc["success"] is True and doc["statistics"]["failedErrors"] == 0
    assert doc["greatExpectations"]["statistics"]["evaluated_expectations"] == len(results)
    # Chart data adds up to the table.
    volume = doc["charts"]["volumeByTopic"]
    assert sum(map(sum, volume["series"].values())) == doc["rows"] and "orders" in volume["series"]
    latency = doc["charts"]["latencyMs"]
    assert sum(latency["counts"]) == messages.where("bornTimestamp IS NOT NULL").count()


def test_html_report_is_self_contained(messages_run):
    with open(messages_run.html_path, encoding="utf-8") as f:
        html = f.read()
    assert not re.search(r"https?://|<script|<link|\bsrc=", html)
    assert html.count("<svg") >= 2 and "priority_range" in html and "priority 15 outside 1..10" in html


def test_results_history_is_a_delta_table(spark, replayed, messages_run):
    settings, _, _ = replayed
    rows = spark.table("quality_results").where(F.col("runId") == messages_run.report["runId"]).collect()
    assert len(rows) == len(messages_run.report["results"])
    by_check = {r["check"]: r for r in rows}
    assert by_check["priority_range"]["unexpected"] == 1 and not by_check["priority_range"]["success"]
    assert by_check["priority_range"]["level"] == "warning" and by_check["key_unique"]["success"]


def test_an_error_level_failure_exits_1(replayed, tmp_path, capsys):
    # At quarantine level the rule must not match anything in messages: the row kept earlier is an error.
    settings, _, _ = replayed
    doc = settings.model_dump()
    doc["quality"]["rules"]["priority_range"] = "quarantine"
    conf = tmp_path / "strict.yaml"
    conf.write_text(yaml.safe_dump(doc))
    assert cli.main(["quality", "--conf", str(conf), "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL priority_range\s+error\s+1 of", out) and "-> FAIL" in out


def test_dead_letters_and_quarantine_suites(replayed, tmp_path, capsys):
    _, _, conf = replayed
    assert cli.main(["quality", "--conf", str(conf), "--table", "dead_letters", "--table", "quarantine",
                     "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    docs = {d["table"]: d for d in (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))}
    dead, quarantine = docs["dead_letters"], docs["quarantine"]
    assert dead["rows"] > 0 and dead["success"] and all(r["success"] for r in dead["results"])
    assert sum(n for _, n in dead["charts"]["byReason"]["items"]) == dead["rows"]
    held = {r["name"]: r for r in quarantine["results"]}["held_by_rule"]
    # The RocketMQ sample's record in topic "orders prod" was held by the topic_name rule.
    assert (held["success"], held["unexpected"], held["samples"][0]["topic"]) == (False, 1, "orders prod")
    assert quarantine["success"] and "quality quarantine:" in out


def test_since_and_a_missing_table(replayed, tmp_path, capsys):
    _, _, conf = replayed
    assert cli.main(["quality", "--conf", str(conf), "--since", "2100-01-01T00:00:00Z", "--out", str(tmp_path),
                     "--table", "quarantine"]) == 0
    [doc] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert doc["rows"] == 0 and doc["since"] == "2100-01-01T00:00:00Z"
    assert cli.main(["quality", "--lake", str(tmp_path / "empty"), "--table", "messages"]) == 2
    assert "table messages not found" in capsys.readouterr().err
    assert cli.main(["quality", "--conf", str(conf), "--since", "yesterday"]) == 2
