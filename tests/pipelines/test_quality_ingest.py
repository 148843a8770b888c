"""Quality rules inside the ingest stream on real segments (quality/rules.py): quarantine and fail.

The warn level (the default of most rules) is checked by tests/pipelines/test_ingest.py.
"""
from __future__ import annotations

import os

import pytest
import yaml
from pyspark.sql import functions as F

from msglake.errors import QualityRuleFailed
from msglake.samples.nsq import generate
from msglake.pipelines import cli
from msglake.pipelines.io import checkpoint as cp
from msglake.pipelines.jobs.ingest import ingest
from tests.conftest import make_settings

pytestmark = pytest.mark.slow


def with_levels(settings, **levels):
    doc = settings.model_dump()
    doc["quality"]["rules"].update(levels)
    return type(settings).model_validate(doc)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("nsq")
    truth = generate(str(root / "nsq"), 300, max_bytes_per_file=64 << 10)
    return root, truth


def test_quarantine_moves_the_rows_with_their_raw_bytes_rule_and_reason(spark, data, tmp_path):
    root, truth = data
    # Retry marking off, so the batch is counted while messages are written (held rows found then).
    settings = with_levels(make_settings(tmp_path / "lake", root / "nsq", dedupWatermarkSeconds=0),
                           priority_range="quarantine",
                           expire_before_born="quarantine")
    summary = ingest(spark, settings)
    assert summary.balanced, summary.lines()
    assert summary.messages == len(truth.messages) - 2
    assert summary.quarantined == len(truth.quarantined) + 2
    assert summary.rule_hits["priority_range"] == ("quarantine", 1)
    held = (
        spark.read.format("delta").load(settings.lake.table_path("quarantine"))
        .where(F.col("rule").isNotNull()).orderBy("rule").collect()
    )
    assert [r.rule for r in held] == ["expire_before_born", "priority_range"]
    assert held[1].reason == "priority_range: priority 15 outside 1..10"
    for r in held:
        with open(os.path.join(root, "nsq", r.topic, r.segment), "rb") as f:
            f.seek(r.segmentPosition)
            assert bytes(r.rawBytes) == f.read(r.recordLength) and len(r.rawBytes) == r.recordLength
        assert b"breaks " + r.rule.encode() in bytes(r.rawBytes)
    messages = spark.read.format("delta").load(settings.lake.table_path("messages"))
    assert messages.where("priority = 15").count() == 0


def test_fail_stops_before_writing_and_a_rerun_after_the_fix_loses_nothing(spark, data, tmp_path):
    root, truth = data
    settings = with_levels(make_settings(tmp_path / "lake", root / "nsq"), store_before_born="fail")
    with pytest.raises(QualityRuleFailed) as e:
        ingest(spark, settings)
    text = str(e.value)
    assert "store_before_born (1 row(s))" in text and "stored 3600000 ms before it was born" in text
    assert "orders/0 orders-0.diskqueue." in text and "nothing of this batch was written" in text
    assert spark.read.format("delta").load(settings.lake.table_path("messages")).count() == 0
    assert cp.committed_positions(settings.lake.checkpoint_path("ingest-test")) == {}

    # The command says the same and exits 3; with the rule at warn the same data goes through.
    conf = tmp_path / "msglake.yaml"
    conf.write_text(yaml.safe_dump(settings.model_dump()))
    assert cli.main(["ingest", "--conf", str(conf)]) == 3
    summary = ingest(spark, with_levels(settings, store_before_born="warn"))
    assert summary.balanced and summary.messages == len(truth.messages)
