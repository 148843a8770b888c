"""Inline SVG charts for the HTML quality report (stdlib only, deterministic).

Each chart function returns one ``<svg>`` element as a string, to embed in an HTML5 page.
The elements carry no ``xmlns`` attribute: inline SVG in HTML does not need one, and the
report must contain no URL at all (the SVG namespace is one). Saved on its own as a
``.svg`` file, a chart would need ``xmlns`` added.

Text extents are estimated from character counts (``CHAR_WIDTH``), since nothing here can
measure a rendered font; labels are truncated or thinned out so they do not overlap.
Coordinates are written with at most two decimals, so the same input gives the same bytes.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape

FONT_FAMILY = "system-ui, sans-serif"
FONT_SIZE = 12
#: Average glyph width as a fraction of the font size (a generous estimate for sans fonts).
CHAR_WIDTH = 0.6
#: Series colours (Tableau 10 plus two); a 13th series reuses the first colour.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f3a5f", "#8cd17d",
)
BAR_COLOUR = PALETTE[0]
GRID_COLOUR = "#e3e3e3"
AXIS_COLOUR = "#888888"
MUTED_COLOUR = "#666666"

_DURATION_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s"))
_COUNT_UNITS = ((1e9, "B"), (1e6, "M"), (1e3, "k"))


# --- number formatting -------------------------------------------------------------------

def format_number(value: object) -> str:
    """Format a count or measure for display, with thousands separators.

    Parameters
    ----------
    value : object
        An int or float; anything else is returned as ``str(value)`` (``None`` as a dash).

    Returns
    -------
    str
        Plain text (not escaped).

    Examples
    --------
    >>> format_number(44000), format_number(1234.5), format_number(0.0273), format_number(None)
    ('44,000', '1,234.5', '0.0273', '—')
    """
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer():
        return f"{value:,.0f}"
    if abs(value) < 1:
        return f"{value:.3g}"
    return _trim(f"{value:,.2f}")


def format_ms(ms: float) -> str:
    """Format a duration in milliseconds compactly: ``1ms``, ``250ms``, ``1.5s``, ``2m``, ``3h``.

    Examples
    --------
    >>> [format_ms(v) for v in (0, 1, 250, 1500, 120_000, -30)]
    ['0', '1ms', '250ms', '1.5s', '2m', '-30ms']
    """
    if math.isnan(ms):
        return "nan"
    if math.isinf(ms):
        return "∞" if ms > 0 else "-∞"
    if ms == 0:
        return "0"
    # Store-minus-born latency goes negative when producer and broker clocks disagree.
    sign = "-" if ms < 0 else ""
    size = abs(ms)
    for unit_ms, unit in _DURATION_UNITS:
        if size >= unit_ms:
            return f"{sign}{_compact(size / unit_ms)}{unit}"
    return f"{sign}{_compact(size)}ms"


def _compact(x: float) -> str:
    """A non-negative number in at most a few characters (axis labels must stay short)."""
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return _trim(f"{x:.1f}")
    return f"{x:.2g}"


def _short_count(x: float) -> str:
    """An axis count with a k/M/B suffix: ``250k``, ``1.2M``."""
    for size, suffix in _COUNT_UNITS:
        if abs(x) >= size:
            return _compact(x / size) + suffix
    return _compact(x)


def _trim(text: str) -> str:
    """Drop trailing zeros of a fixed-point number: ``'1.50'`` -> ``'1.5'``, ``'2.00'`` -> ``'2'``."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def _count(value: object) -> float:
    """A value as a drawable non-negative size; None, NaN, negatives and non-numbers draw as 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


# --- SVG building blocks -----------------------------------------------------------------

def _esc(text: object) -> str:
    return escape(str(text), quote=True)


def _n(v: float) -> str:
    """A coordinate with at most two decimals (short, and byte-stable across runs)."""
    text = _trim(f"{v:.2f}")
    return "0" if text == "-0" else text


def _text_width(text: str, size: int = FONT_SIZE) -> float:
    return len(text) * size * CHAR_WIDTH


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _svg(width: float, height: float, title: str, body: Sequence[str]) -> str:
    """The root element: accessible name, visible title, then the chart body."""
    head = (
        f'<svg class="chart" viewBox="0 0 {_n(width)} {_n(height)}" width="{_n(width)}" '
        f'height="{_n(height)}" role="img" aria-label="{_esc(title)}" '
        f'font-family="{FONT_FAMILY}" font-size="{FONT_SIZE}">'
    )
    heading = _text(0, 16, title, size=14, weight="600")
    return "".join([head, f"<title>{_esc(title)}</title>", heading, *body, "</svg>"])


def _text(x: float, y: float, content: str, anchor: str = "start", size: int | None = None,
          weight: str | None = None, fill: str | None = None) -> str:
    attrs = f'x="{_n(x)}" y="{_n(y)}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if size is not None:
        attrs += f' font-size="{size}"'
    if weight is not None:
        attrs += f' font-weight="{weight}"'
    if fill is not None:
        attrs += f' fill="{fill}"'
    return f"<text {attrs}>{_esc(content)}</text>"


def _rect(x: float, y: float, w: float, h: float, fill: str, tip: str | None = None,
          opacity: float | None = None) -> str:
    attrs = f'x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{_n(max(h, 0))}" fill="{fill}"'
    if opacity is not None:
        attrs += f' fill-opacity="{_n(opacity)}"'
    if tip is None:
        return f"<rect {attrs}/>"
    # A <title> child is what browsers show as the hover tooltip.
    return f"<rect {attrs}><title>{_esc(tip)}</title></rect>"


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str) -> str:
    return f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{stroke}"/>'


def _no_data(title: str, width: float = 640) -> str:
    return _svg(width, 56, title, [_text(0, 44, "no data", fill=MUTED_COLOUR)])


def _ticks(max_value: float, count: int = 4) -> list[float]:
    """Round y-axis ticks from 0 up to at least ``max_value`` (counts: steps of at least 1)."""
    if max_value <= 0:
        return [0.0, 1.0]
    raw = max_value / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if raw <= m * magnitude)
    step = max(step, 1.0)
    n = math.ceil(max_value / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _y_axis(ticks: Sequence[float], left: float, right: float, top: float, bottom: float) -> list[str]:
    """Horizontal grid lines with their labels, for a plot spanning ``top``..``bottom``."""
    parts = []
    for tick in ticks:
        y = bottom - (bottom - top) * tick / ticks[-1]
        parts.append(_line(left, y, right, y, GRID_COLOUR))
        parts.append(_text(left - 4, y + 4, _short_count(tick), anchor="end", size=11, fill=MUTED_COLOUR))
    parts.append(_line(left, bottom, right, bottom, AXIS_COLOUR))
    return parts


def _label_step(n_labels: int, label_chars: int, space: float, size: int = 11) -> int:
    """Show every k-th of ``n_labels`` labels so that those shown do not overlap."""
    per_label = _text_width("x" * label_chars, size) + 10
    fits = max(1, int(space // per_label))
    return max(1, math.ceil(n_labels / fits))


# --- charts ------------------------------------------------------------------------------

def bar_chart(items: Sequence[tuple[str, int | float]], title: str, unit: str = "") -> str:
    """Horizontal bars, one per item, in the given order, each labelled with its value.

    Parameters
    ----------
    items : sequence of (label, value)
        E.g. dead letters or quarantined rows by reason. Non-numeric or negative values
        draw an empty bar but still show their text.
    title : str
        Chart heading.
    unit : str, optional
        Appended to each value label (``"12 ms"``).

    Returns
    -------
    str
        One ``<svg>`` element (a "no data" one when ``items`` is empty).
    """
    rows = [(str(label), value) for label, value in items]
    if not rows:
        return _no_data(title)
    width, top, row_h, bar_h, label_limit = 640, 28, 22, 14, 28
    texts = [format_number(v) + (f" {unit}" if unit else "") for _, v in rows]
    label_w = _text_width("x" * min(max(len(label) for label, _ in rows), label_limit)) + 8
    value_w = _text_width("x" * max(len(t) for t in texts)) + 8
    bar_space = max(width - label_w - value_w, 60)
    peak = max(_count(v) for _, v in rows)
    scale = bar_space / peak if peak > 0 else 0.0
    body = []
    for i, ((label, value), text) in enumerate(zip(rows, texts)):
        y = top + i * row_h
        length = _count(value) * scale
        body.append(_text(label_w - 6, y + bar_h - 3, _truncate(label, label_limit), anchor="end"))
        body.append(_rect(label_w, y, length, bar_h, BAR_COLOUR, tip=f"{label}: {text}"))
        body.append(_text(label_w + length + 4, y + bar_h - 3, text, fill=MUTED_COLOUR))
    return _svg(width, top + len(rows) * row_h + 4, title, body)


def histogram(edges: Sequence[float], counts: Sequence[int], title: str, x_label: str, *,
              edge_format: Callable[[float], str] = format_ms) -> str:
    """Columns of equal width per bin, labelled by bin edges (which may be on a log-like scale).

    Parameters
    ----------
    edges : sequence of float
        Bin boundaries, ``len(counts) + 1`` of them.
    counts : sequence of int
        Rows per bin; all zeros is fine.
    title, x_label : str
        Chart heading and the caption under the x axis.
    edge_format : callable, optional
        Formats an edge for the axis and tooltips; milliseconds (``format_ms``) by default.

    Returns
    -------
    str
        One ``<svg>`` element (a "no data" one when ``counts`` is empty).

    Raises
    ------
    ValueError
        When ``len(edges) != len(counts) + 1``.
    """
    if not counts:
        return _no_data(title)
    if len(edges) != len(counts) + 1:
        raise ValueError(f"histogram needs len(counts) + 1 edges, got {len(edges)} edges for {len(counts)} counts")
    values = [_count(c) for c in counts]
    ticks = _ticks(max(values))
    width, height, top = 640, 250, 32
    left = _text_width(_short_count(ticks[-1]), 11) + 10
    right, bottom = width - 16, height - 46
    col_w = (right - left) / len(values)
    gap = 1.0 if col_w > 4 else 0.0
    labels = [edge_format(e) for e in edges]
    body = _y_axis(ticks, left, right, top, bottom)
    for i, (value, raw) in enumerate(zip(values, counts)):
        x = left + i * col_w
        h = (bottom - top) * value / ticks[-1]
        body.append(_rect(x + gap / 2, bottom - h, col_w - gap, h, BAR_COLOUR))
        # An invisible full-height column carries the tooltip, so empty bins can be hovered too.
        tip = f"{labels[i]} – {labels[i + 1]}: {format_number(raw)}"
        body.append(_rect(x, top, col_w, bottom - top, "#000000", tip=tip, opacity=0))
    step = _label_step(len(labels), max(len(t) for t in labels), right - left)
    for i in range(0, len(labels), step):
        body.append(_x_label(left + i * col_w, bottom, labels[i], width))
    body.append(_text((left + right) / 2, height - 8, x_label, anchor="middle"))
    if max(values) == 0:
        body.append(_text((left + right) / 2, (top + bottom) / 2, "all counts are zero", anchor="middle",
                          fill=MUTED_COLOUR))
    return _svg(width, height, title, body)


def stacked_series(buckets: Sequence[str], series: Mapping[str, Sequence[int]], title: str) -> str:
    """Stacked columns over time: one column per bucket, one colour per series, with a legend.

    Parameters
    ----------
    buckets : sequence of str
        X labels in order (e.g. ISO times); only some are shown when there are many.
    series : mapping of str to sequence of int
        Per series (e.g. topic) one value per bucket; stacked in mapping order. Colours
        wrap after ``len(PALETTE)`` series.
    title : str
        Chart heading.

    Returns
    -------
    str
        One ``<svg>`` element (a "no data" one when there are no buckets or no series).

    Raises
    ------
    ValueError
        When a series does not have one value per bucket.
    """
    names = [str(name) for name in series]
    columns = [list(values) for values in series.values()]
    if not buckets or not names:
        return _no_data(title, width=760)
    for name, values in zip(names, columns):
        if len(values) != len(buckets):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(buckets)} buckets")
    totals = [sum(_count(values[i]) for values in columns) for i in range(len(buckets))]
    ticks = _ticks(max(totals))
    width, top, plot_h = 760, 32, 220
    left = _text_width(_short_count(ticks[-1]), 11) + 10
    right, bottom = width - 16, top + plot_h
    col_w = (right - left) / len(buckets)
    gap = col_w * 0.15 if col_w >= 4 else 0.0
    body = _y_axis(ticks, left, right, top, bottom)
    for i, bucket in enumerate(buckets):
        body.extend(_stack(i, str(bucket), names, columns, left + i * col_w + gap / 2, col_w - gap,
                           bottom, plot_h / ticks[-1], totals[i]))
    body.extend(_bucket_labels([str(b) for b in buckets], left, right, col_w, bottom, width))
    legend, legend_h = _legend(names, columns, left, bottom + 36, right)
    body.extend(legend)
    return _svg(width, bottom + 36 + legend_h, title, body)


def _stack(i: int, bucket: str, names: Sequence[str], columns: Sequence[Sequence[object]], x: float,
           w: float, bottom: float, scale: float, total: float) -> list[str]:
    """The segments of bucket ``i``'s column, bottom-up; zero values draw nothing."""
    parts, y = [], bottom
    for j, (name, values) in enumerate(zip(names, columns)):
        value = _count(values[i])
        if value == 0:
            continue
        h = value * scale
        y -= h
        tip = f"{bucket}\n{name}: {format_number(values[i])} of {format_number(total)}"
        parts.append(_rect(x, y, w, h, PALETTE[j % len(PALETTE)], tip=tip))
    return parts


def _bucket_labels(labels: Sequence[str], left: float, right: float, col_w: float, bottom: float,
                   width: float) -> list[str]:
    """Every k-th bucket label under its column, kept inside the chart's width."""
    step = _label_step(len(labels), max(len(t) for t in labels), right - left)
    parts = []
    for i in range(0, len(labels), step):
        x = left + (i + 0.5) * col_w
        parts.append(_line(x, bottom, x, bottom + 4, AXIS_COLOUR))
        parts.append(_x_label(x, bottom, labels[i], width))
    return parts


def _x_label(x: float, bottom: float, label: str, width: float) -> str:
    """A label centred under ``x``, shifted inwards where it would run off the chart's edge."""
    half = _text_width(label, 11) / 2 + 4
    x = min(max(x, half), width - half)
    return _text(x, bottom + 16, label, anchor="middle", size=11, fill=MUTED_COLOUR)


def _legend(names: Sequence[str], columns: Sequence[Sequence[object]], left: float, top: float,
            right: float) -> tuple[list[str], float]:
    """Swatch + name (+ total) per series, wrapped into rows; returns the parts and their height."""
    parts, x, y, row_h = [], left, top, 18
    for j, (name, values) in enumerate(zip(names, columns)):
        label = f"{_truncate(name, 32)} ({format_number(sum(_count(v) for v in values))})"
        item_w = 16 + _text_width(label) + 14
        if x > left and x + item_w > right:
            x, y = left, y + row_h
        parts.append(_rect(x, y - 10, 11, 11, PALETTE[j % len(PALETTE)], tip=name))
        parts.append(_text(x + 16, y, label))
        x += item_w
    return parts, y - top + row_h
