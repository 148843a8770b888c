"""The HTML quality report and its SVG charts: self-contained, escaped, robust, deterministic (no Spark)."""
from __future__ import annotations

import copy
import doctest
import re

import pytest

from msglake.quality import charts, report_html
from msglake.quality.charts import bar_chart, format_ms, histogram, stacked_series
from msglake.quality.report_html import render

SPECIAL = "<b>& 'x' \"y\""


def sample_report() -> dict:
    """A report with a failing error, a failing warning and a pass, listed passes first."""
    buckets = [f"2026-11-01T{h:02d}:00Z" for h in range(24)]
    return {
        "table": "messages",
        "since": "2026-11-01T00:00:00Z",
        "runId": "20261123T121500Z-messages",
        "evaluatedAt": "2026-11-23T12:15:00Z",
        "lake": "/abs/path/lake",
        "rows": 44000,
        "success": False,
        "statistics": {"evaluated": 3, "successful": 1, "failed": 2, "failedErrors": 1},
        "results": [
            {"name": "message_id_not_null", "expectation": "expect_column_values_to_not_be_null",
             "column": "messageId", "level": "error", "description": "every row has an id", "success": True,
             "evaluated": 44000, "unexpected": 0, "unexpectedPercent": 0.0, "samples": []},
            {"name": "body_size", "expectation": "expect_column_values_to_be_between", "column": "bodySize",
             "level": "warning", "description": "body under 1 MiB", "success": False,
             "evaluated": 44000, "unexpected": 3, "unexpectedPercent": 0.0068,
             "samples": [{"topic": "orders", "partition": 1, "bodySize": 2_000_000}]},
            {"name": "priority_range", "expectation": "expect_column_values_to_be_null", "column": "priority",
             "level": "error", "description": "priority outside 1..10", "success": False,
             "evaluated": 44000, "unexpected": 12, "unexpectedPercent": 0.027,
             "samples": [
                 {"topic": "orders", "partition": 0, "segment": "x.dat", "segmentPosition": 123,
                  "messageId": "17", "value": SPECIAL},
                 {"topic": "orders", "partition": 0, "segment": "x.dat", "segmentPosition": 456,
                  "messageId": None, "extra": 1.5},
             ]},
        ],
        "charts": {
            "volumeByTopic": {"buckets": buckets,
                              "series": {"orders": [10 + h for h in range(24)], "payments": [h % 5 for h in range(24)]}},
            "latencyMs": {"edges": [0, 1, 10, 100, 1000, 60_000], "counts": [5, 40, 300, 20, 1]},
            "byReason": {"title": "Dead letters by reason", "items": [["expired", 120], ["rejected", 4]]},
        },
    }


def test_document_is_self_contained():
    page = render(sample_report())
    assert page.startswith("<!DOCTYPE html>")
    lowered = page.lower()
    for forbidden in ("http://", "https://", "<script", "<link", "src=", "url(", "@import", "<img", "<iframe"):
        assert forbidden not in lowered, forbidden


def test_all_three_charts_render_inline():
    page = render(sample_report())
    assert page.count("<svg") == 3
    for title in ("Volume per topic over time", "Store minus born latency (ms)", "Dead letters by reason"):
        assert f"<title>{title}</title>" in page
    assert "no data" not in page


def test_failing_error_result_shows_fail_and_escaped_samples():
    page = render(sample_report())
    assert '<span class="badge fail">FAIL</span>' in page
    assert "&lt;b&gt;&amp; &#x27;x&#x27; &quot;y&quot;" in page
    assert "<b>" not in page
    samples = page.split("Sample failing rows", 1)[1]
    assert "priority_range" in samples and "body_size" in samples
    # Union of keys in first-seen order; a key a row lacks is an empty cell, None shows as null.
    header = re.search(r'<table class="samples"><tr>(.*?)</tr>', samples).group(1)
    assert re.findall(r"<th>(.*?)</th>", header) == [
        "topic", "partition", "segment", "segmentPosition", "messageId", "value", "extra"]
    assert '<td class="null">null</td>' in samples and '<td class="missing"></td>' in samples


def test_summary_lists_error_failures_first_with_separators():
    page = render(sample_report())
    table = page.split('<table class="results">', 1)[1].split("</table>", 1)[0]
    order = [table.index(name) for name in ("priority_range", "body_size", "message_id_not_null")]
    assert order == sorted(order)
    assert table.count('<tr class="failed') == 2
    assert "44,000" in table and "0.027%" in table


@pytest.mark.parametrize("report", [
    {},
    {"table": "messages", "results": [], "charts": {}},
    {"table": None, "since": None, "rows": None, "success": None, "statistics": None, "results": None,
     "charts": None},
    {"results": [{"name": None, "column": None, "level": None, "success": False, "evaluated": None,
                  "unexpected": None, "unexpectedPercent": None, "samples": [{"a": None}, {}]}]},
])
def test_sparse_reports_do_not_crash(report):
    page = render(report)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")


def test_empty_charts_say_no_data():
    report = {"charts": {"volumeByTopic": {"buckets": [], "series": {}}, "latencyMs": {"edges": [], "counts": []},
                         "byReason": {"items": []}}}
    page = render(report)
    assert page.count("<svg") == 3 and page.count("no data") == 3


def test_malformed_chart_is_reported_not_raised():
    report = sample_report()
    report["charts"]["latencyMs"] = {"edges": [0, 1], "counts": [1, 2, 3]}
    report["charts"]["byReason"] = "oops"
    page = render(report)
    assert "Chart latencyMs could not be drawn" in page and "Chart byReason could not be drawn" in page
    assert page.count("<svg") == 1


def test_output_is_deterministic():
    report = sample_report()
    assert render(report) == render(copy.deepcopy(report))
    assert render(report) == render(report)


def test_histogram_with_zero_counts():
    svg = histogram([0, 1, 10, 100], [0, 0, 0], "latency", "ms")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "all counts are zero" in svg
    assert "<title>0 – 1ms: 0</title>" in svg


def test_histogram_rejects_mismatched_edges():
    with pytest.raises(ValueError):
        histogram([0, 1], [1, 2], "t", "x")


def test_bar_chart_escapes_and_has_tooltips():
    svg = bar_chart([("<x>&", 3), ("ok", 1_234_567)], "by <reason>", unit="rows")
    assert "<x>" not in svg and "&lt;x&gt;&amp;" in svg and "by &lt;reason&gt;" in svg
    assert "<title>ok: 1,234,567 rows</title>" in svg


def test_stacked_series_many_series_and_buckets():
    buckets = [f"b{i:03d}" for i in range(200)]
    series = {f"topic{j}": [(i * j) % 7 for i in range(200)] for j in range(13)}
    svg = stacked_series(buckets, series, "volume")
    # The 13th series wraps to the first colour; only some x labels are drawn.
    assert f'fill="{charts.PALETTE[0]}"><title>topic12' in svg
    shown = [b for b in buckets if f">{b}</text>" in svg]
    assert 2 <= len(shown) < 40
    assert stacked_series([], {}, "volume").count("no data") == 1


def test_format_ms_is_compact():
    assert [format_ms(v) for v in (0, 1, 250, 1500, 120_000, 5_400_000)] == ["0", "1ms", "250ms", "1.5s", "2m", "1.5h"]


def test_docstring_examples_run():
    for module in (report_html, charts):
        outcome = doctest.testmod(module)
        assert outcome.attempted > 0 and outcome.failed == 0
