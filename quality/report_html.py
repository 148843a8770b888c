"""Render a validation report (a JSON-ready dict) as one self-contained HTML5 page.

The page has inline CSS and inline SVG only: no script, no stylesheet or image links, no
URL, so it can be mailed, archived next to the run, or opened offline. A Content Security
Policy that allows nothing but inline styles backs that up. Rendering is deterministic
(no clock, no randomness): the same report gives the same bytes.

Layout: header (table, lake, window, run, PASS/FAIL badge), summary table of the results
(failures first), the charts present in ``report["charts"]``, then the sample failing rows
of each failed result.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from html import escape

from msglake.quality.charts import bar_chart, format_number, histogram, stacked_series

#: Longest sample value shown in full; a message body can be megabytes.
MAX_CELL_CHARS = 300

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, sans-serif; font-size: 14px; color: #222; margin: 24px auto;
       max-width: 1100px; padding: 0 16px; line-height: 1.4; }
h1 { font-size: 22px; margin: 0 0 8px; display: flex; align-items: center; gap: 12px; }
h2 { font-size: 17px; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
.badge { font-size: 13px; font-weight: 700; padding: 2px 10px; border-radius: 4px; color: #fff; }
.badge.pass { background: #2e7d32; } .badge.fail { background: #c62828; } .badge.unknown { background: #757575; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.meta dt { color: #666; } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
p.stats, p.note, .muted { color: #666; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td { background: #fdecea; } tr.failed.warning td { background: #fff6e0; }
td.status { font-weight: 700; } tr.failed td.status { color: #c62828; } tr.passed td.status { color: #2e7d32; }
td.null { color: #999; font-style: italic; } td.missing { background: #fafafa; }
.desc { color: #666; font-size: 12px; }
.samples td { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; max-width: 480px; }
figure { margin: 12px 0 20px; } svg.chart { max-width: 100%; height: auto; }
@media print { body { margin: 0; max-width: none; } h2 { break-after: avoid; } }
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'"


def render(report: Mapping) -> str:
    """Render a validation report as a complete, self-contained HTML5 document.

    Parameters
    ----------
    report : Mapping
        The report dict (``table``, ``since``, ``runId``, ``evaluatedAt``, ``lake``,
        ``rows``, ``success``, ``statistics``, ``results``, ``charts``); every key is
        optional and ``None`` values are shown as dashes.

    Returns
    -------
    str
        The HTML document; all report text is escaped.

    Examples
    --------
    >>> page = render({"table": "messages", "rows": 44000, "success": True, "results": []})
    >>> page.startswith("<!DOCTYPE html>"), "PASS" in page, "44,000" in page, "<script" in page
    (True, True, True, False)
    """
    results = _ordered(report.get("results") or [])
    body = [
        _header(report, results),
        _summary_table(results),
        _charts_section(report.get("charts") or {}),
        _samples_section(results),
    ]
    return "\n".join([_head(report), "<body>", *body, "</body>", "</html>", ""])


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _status(success: object) -> tuple[str, str]:
    """(text, css class) of a success flag; ``None`` means the check did not produce one."""
    if success is True:
        return "PASS", "pass"
    if success is False:
        return "FAIL", "fail"
    return "UNKNOWN", "unknown"


def _ordered(results: Sequence[Mapping]) -> list[Mapping]:
    """Error-level failures, then other failures, then undecided, then passes (stable within each)."""
    def rank(result: Mapping) -> int:
        if result.get("success") is False:
            return 0 if result.get("level") == "error" else 1
        return 2 if result.get("success") is None else 3
    return sorted(results, key=rank)


def _head(report: Mapping) -> str:
    status, _ = _status(report.get("success"))
    title = f"msglake quality: {report.get('table') or '?'} ({status})"
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
    ])


def _header(report: Mapping, results: Sequence[Mapping]) -> str:
    status, css = _status(report.get("success"))
    since = report.get("since")
    meta = [
        ("Lake", report.get("lake")),
        ("Since", since if since is not None else "all data"),
        ("Evaluated at", report.get("evaluatedAt")),
        ("Rows validated", format_number(report.get("rows"))),
        ("Run", report.get("runId")),
    ]
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e('—' if v is None else v)}</dd>" for k, v in meta)
    return (
        f'<header><h1>Data quality: {_e(report.get("table") or "?")} '
        f'<span class="badge {css}">{status}</span></h1>'
        f'<dl class="meta">{items}</dl>'
        f'<p class="stats">{_e(_stats_line(report.get("statistics"), results))}</p></header>'
    )


def _stats_line(statistics: Mapping | None, results: Sequence[Mapping]) -> str:
    """One sentence of totals; counted from ``results`` when the report has no statistics."""
    stats = dict(statistics or {})
    if not stats:
        failed = [r for r in results if r.get("success") is False]
        stats = {"evaluated": len(results), "successful": sum(r.get("success") is True for r in results),
                 "failed": len(failed), "failedErrors": sum(r.get("level") == "error" for r in failed)}
    n = format_number
    return (f"{n(stats.get('evaluated'))} expectations evaluated: {n(stats.get('successful'))} passed, "
            f"{n(stats.get('failed'))} failed ({n(stats.get('failedErrors'))} at error level).")


def _anchor(index: int) -> str:
    """Id of a failed result's samples section (by position, since names need not be unique)."""
    return f"result-{index}"


def _percent(result: Mapping) -> str:
    """``unexpectedPercent`` (already in percent), or computed from the counts when missing."""
    pct = result.get("unexpectedPercent")
    evaluated, unexpected = result.get("evaluated"), result.get("unexpected")
    if pct is None and isinstance(evaluated, int) and isinstance(unexpected, int) and evaluated > 0:
        pct = 100.0 * unexpected / evaluated
    if not isinstance(pct, (int, float)) or isinstance(pct, bool):
        return "—"
    # A failing check must not round to 0% or 100%.
    if 0 < pct < 0.001:
        return "<0.001%"
    if 99.99 < pct < 100:
        return ">99.99%"
    return format_number(pct) + "%"


def _summary_table(results: Sequence[Mapping]) -> str:
    if not results:
        return '<section><h2>Results</h2><p class="note">No expectations were evaluated.</p></section>'
    head = ("<tr><th>Name</th><th>Level</th><th>Column</th><th>Evaluated</th><th>Unexpected</th>"
            "<th>%</th><th>Result</th></tr>")
    rows = [_summary_row(i, r) for i, r in enumerate(results)]
    return f'<section><h2>Results</h2><table class="results">{head}{"".join(rows)}</table></section>'


def _summary_row(index: int, result: Mapping) -> str:
    status, _ = _status(result.get("success"))
    failed = result.get("success") is False
    level = str(result.get("level") or "")
    css = f"{'failed' if failed else 'passed' if result.get('success') else 'unknown'} {_e(level)}".strip()
    name = _e(result.get("name") or "?")
    if failed:
        name = f'<a href="#{_anchor(index)}">{name}</a>'
    desc = result.get("description")
    desc_html = f'<div class="desc">{_e(desc)}</div>' if desc else ""
    expectation = _e(result.get("expectation") or "")
    cells = [
        f'<td title="{expectation}">{name}{desc_html}</td>',
        f"<td>{_e(level or '—')}</td>",
        f"<td>{_e(result.get('column') or '—')}</td>",
        f'<td class="num">{_e(format_number(result.get("evaluated")))}</td>',
        f'<td class="num">{_e(format_number(result.get("unexpected")))}</td>',
        f'<td class="num">{_e(_percent(result))}</td>',
        f'<td class="status">{status}</td>',
    ]
    return f'<tr class="{css}">{"".join(cells)}</tr>'


def _charts_section(charts: Mapping) -> str:
    """The charts present, in a fixed order; one malformed chart does not sink the page."""
    builders: list[tuple[str, Callable[[Mapping], str]]] = [
        ("volumeByTopic", lambda c: stacked_series(list(c.get("buckets") or []), dict(c.get("series") or {}),
                                                   "Volume per topic over time")),
        ("latencyMs", lambda c: histogram(list(c.get("edges") or []), list(c.get("counts") or []),
                                          "Store minus born latency (ms)", "storeTimestamp − bornTimestamp")),
        ("byReason", lambda c: bar_chart([(str(k), v) for k, v in c.get("items") or []],
                                         str(c.get("title") or "By reason"))),
    ]
    figures = [_figure(key, build, charts[key]) for key, build in builders if charts.get(key) is not None]
    if not figures:
        return ""
    return f'<section><h2>Charts</h2>{"".join(figures)}</section>'


def _figure(key: str, build: Callable[[Mapping], str], data: object) -> str:
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        return f"<figure>{build(data)}</figure>"
    except (ValueError, TypeError) as exc:
        # The report comes from another process; show what is wrong rather than no page at all.
        return f'<p class="note">Chart {_e(key)} could not be drawn: {_e(exc)}</p>'


def _samples_section(results: Sequence[Mapping]) -> str:
    blocks = [_sample_block(i, r) for i, r in enumerate(results) if r.get("success") is False]
    if not blocks:
        return ""
    return f'<section><h2>Sample failing rows</h2>{"".join(blocks)}</section>'


def _sample_block(index: int, result: Mapping) -> str:
    title = _e(result.get("name") or "?")
    what = " · ".join(_e(x) for x in (result.get("level"), result.get("expectation"), result.get("column")) if x)
    samples = [s for s in result.get("samples") or [] if isinstance(s, Mapping)]
    table = _sample_table(samples) if samples else '<p class="note">No sample rows were recorded.</p>'
    desc = result.get("description")
    desc_html = f'<p class="desc">{_e(desc)}</p>' if desc else ""
    return f'<h3 id="{_anchor(index)}">{title} <span class="muted">{what}</span></h3>{desc_html}{table}'


def _sample_table(samples: Sequence[Mapping]) -> str:
    """Rows as given; columns are the union of their keys in first-seen order."""
    columns = list(dict.fromkeys(str(k) for s in samples for k in s))
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    rows = []
    for sample in samples:
        by_name = {str(k): v for k, v in sample.items()}
        rows.append("<tr>" + "".join(_cell(by_name, c) for c in columns) + "</tr>")
    return f'<table class="samples"><tr>{head}</tr>{"".join(rows)}</table>'


def _cell(sample: Mapping, column: str) -> str:
    """A sample value as-is (no thousands separators: offsets and ids get copied into tools)."""
    if column not in sample:
        return '<td class="missing"></td>'
    value = sample[column]
    if value is None:
        return '<td class="null">null</td>'
    if isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    else:
        text = str(value)
    if len(text) > MAX_CELL_CHARS:
        text = f"{text[:MAX_CELL_CHARS]}… ({len(text) - MAX_CELL_CHARS:,} more characters)"
    css = ' class="num"' if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
    return f"<td{css}>{_e(text)}</td>"
