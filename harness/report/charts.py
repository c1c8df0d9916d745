"""Inline SVG charts for the report: per-rank bars or dots grouped by node, line charts, a timeline.

Small code of ours rather than a plotting library: the kubetest2 image stays small (matplotlib
brings numpy and a renderer for tens of megabytes; pygal and leather add a dependency for a few
hundred lines and still need our own per-node grouping, straggler marks and escaping rules). The
charts style themselves through the page's CSS classes (light and dark themes), every number is
rounded to one decimal of a pixel (size), and each chart has a <title> and a <desc>.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from html import escape

from harness.report.junit import xml_safe

WIDTH = 760.0
LEFT, RIGHT, TOP = 64.0, 150.0, 14.0  # the right margin holds the lines' labels
LABEL_GAP = 20.0  # px between slanted node labels (10 px text at 35 degrees needs ~18)
_SURROGATE = re.compile("[\ud800-\udfff]")
BAR_LIMIT = 64  # ranks drawn as bars up to this many; beyond, as dots (bars would be under 10 px)
SERIES_STYLES = 16  # distinct line styles: 8 colours, solid then dashed


def clean(text: object) -> str:
    """Text that any HTML page can hold: lone surrogates (from JSON's \\udXXX escapes; a str holds no
    pairs) and C0 controls replaced by U+FFFD, ANSI escapes removed."""
    return xml_safe(_SURROGATE.sub("\ufffd", str(text)))


def esc(text: object) -> str:
    """Text or attribute value, cleaned and escaped for HTML and SVG (any bytes a run produced)."""
    return escape(clean(text), quote=True)


def fmt_number(value: float) -> str:
    """A value for people: 3-4 significant figures, thousands separated."""
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return "0" if size == 0 else f"{value:.3g}"


def fmt_bytes(value: float) -> str:
    """A message size: 8 B, 64 KiB, 16 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value} TiB"  # unreachable: the loop returns at TiB


def _px(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Scale:
    """Maps data values in [lo, hi] onto pixels [px_lo, px_hi], linearly or on log2."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def __call__(self, value: float) -> float:
        lo, hi, value = (math.log2(self.lo), math.log2(self.hi), math.log2(value)) if self.log \
            else (self.lo, self.hi, value)
        fraction = 0.5 if hi == lo else (value - lo) / (hi - lo)
        return self.px_lo + fraction * (self.px_hi - self.px_lo)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round ticks (1, 2, 5 x 10^k apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw_step = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    first = math.floor(lo / step) * step
    return [round(first + i * step, 12) for i in range(math.ceil((hi - first) / step) + 1)]


def tick_text(value: float, ticks: Sequence[float]) -> str:
    """A tick label with as many decimals as the ticks' spacing needs (0, 0.5, 1 rather than 0.00)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else abs(value) or 1.0
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:,.{decimals}f}"


def log2_ticks(lo: float, hi: float, max_count: int = 9) -> list[float]:
    """Powers of two in [lo, hi], every k-th so that at most max_count remain."""
    exponents = list(range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1))
    stride = max(1, math.ceil(len(exponents) / max_count))
    return [2.0 ** e for e in exponents[::stride]]


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line: a straggler reference, a threshold, a minimum, a floor."""

    value: float
    label: str
    css: str  # ref | thr | min | floor


@dataclass(frozen=True)
class Frame:
    """The plot area of a chart, in viewBox pixels."""

    width: float
    height: float
    bottom: float  # room under the plot for x labels

    @property
    def x0(self) -> float:
        return LEFT

    @property
    def x1(self) -> float:
        return self.width - RIGHT

    @property
    def y0(self) -> float:  # the baseline (bottom of the plot)
        return self.height - self.bottom

    @property
    def y1(self) -> float:
        return TOP


def svg(chart_id: str, frame: Frame, title: str, desc: str, body: Iterable[str]) -> str:
    """The <svg> element: scalable, labelled by its <title> and <desc> for screen readers."""
    return (f'<svg class="chart" id="{esc(chart_id)}" viewBox="0 0 {_px(frame.width)} {_px(frame.height)}" '
            f'role="img" aria-labelledby="{esc(chart_id)}-t {esc(chart_id)}-d" '
            f'xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{esc(chart_id)}-t">{esc(title)}</title><desc id="{esc(chart_id)}-d">{esc(desc)}</desc>'
            + "".join(body) + "</svg>")


def y_axis(frame: Frame, scale: Scale, label: str) -> str:
    """Grid lines and tick labels on the left, the axis label written upwards."""
    parts = []
    ticks = nice_ticks(scale.lo, scale.hi)
    for tick in ticks:
        if tick < scale.lo - 1e-9 or tick > scale.hi + 1e-9:
            continue
        y = _px(scale(tick))
        parts.append(f'<line class="grid" x1="{_px(frame.x0)}" x2="{_px(frame.x1)}" y1="{y}" y2="{y}"/>'
                     f'<text class="tick" x="{_px(frame.x0 - 4)}" y="{y}" text-anchor="end" '
                     f'dominant-baseline="middle">{esc(tick_text(tick, ticks))}</text>')
    middle = _px((frame.y0 + frame.y1) / 2)
    parts.append(f'<text class="axis-label" x="12" y="{middle}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {middle})">{esc(label)}</text>')
    parts.append(f'<line class="axis" x1="{_px(frame.x0)}" x2="{_px(frame.x1)}" '
                 f'y1="{_px(frame.y0)}" y2="{_px(frame.y0)}"/>')
    return "".join(parts)


def x_axis(frame: Frame, scale: Scale, ticks: Sequence[float], label: str,
           fmt: Callable[[float], str] | None = None) -> str:
    """Tick labels under the plot and the axis label below them."""
    parts = []
    for tick in ticks:
        x = _px(scale(tick))
        parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{_px(frame.y1)}" y2="{_px(frame.y0)}"/>'
                     f'<text class="tick" x="{x}" y="{_px(frame.y0 + 14)}" text-anchor="middle">'
                     f'{esc(fmt(tick) if fmt else tick_text(tick, ticks))}</text>')
    parts.append(f'<text class="axis-label" x="{_px((frame.x0 + frame.x1) / 2)}" y="{_px(frame.height - 4)}" '
                 f'text-anchor="middle">{esc(label)}</text>')
    return "".join(parts)


def hlines(frame: Frame, scale: Scale, lines: Sequence[HLine]) -> str:
    """Dashed horizontal lines, each labelled in the right margin (labels pushed apart, never on the data)."""
    parts, next_free = [], -math.inf
    for line in sorted(lines, key=lambda item: -item.value):
        y = scale(line.value)
        label_y = max(y, next_free)
        next_free = label_y + 11
        parts.append(f'<line class="hline {esc(line.css)}" x1="{_px(frame.x0)}" x2="{_px(frame.x1)}" '
                     f'y1="{_px(y)}" y2="{_px(y)}"><title>{esc(line.label)}</title></line>'
                     f'<text class="hline-label {esc(line.css)}" x="{_px(frame.x1 + 4)}" y="{_px(label_y)}" '
                     f'dominant-baseline="middle">{esc(line.label)}</text>')
    return "".join(parts)


# ---- per-rank charts, grouped by node ----

@dataclass(frozen=True)
class RankValue:
    rank: int
    node: str
    pod: str
    value: float | None
    slow: bool = False


@dataclass
class _Group:
    node: str
    ranks: list[RankValue] = field(default_factory=list)
    x_start: float = 0.0
    x_end: float = 0.0

    @property
    def slow(self) -> bool:
        return any(r.slow for r in self.ranks)

    @property
    def center(self) -> float:
        return (self.x_start + self.x_end) / 2


def _groups_by_node(values: Sequence[RankValue], frame: Frame) -> tuple[list[_Group], float]:
    """Ranks grouped by node (nodes in order of their lowest rank), laid out left to right with a
    one-slot gap between nodes; returns the groups and the width of one rank's slot."""
    groups: dict[str, _Group] = {}
    for value in sorted(values, key=lambda v: v.rank):
        groups.setdefault(value.node, _Group(value.node)).ranks.append(value)
    slots = len(values) + max(0, len(groups) - 1)
    slot = (frame.x1 - frame.x0) / max(1, slots)
    x = frame.x0
    for group in groups.values():
        group.x_start, group.x_end = x, x + slot * len(group.ranks)
        x = group.x_end + slot
    return list(groups.values()), slot


def _node_labels(groups: Sequence[_Group], frame: Frame) -> str:
    """Node names under their groups, slanted. Nodes holding a slow rank are always named; the others
    only where their label keeps LABEL_GAP px from every label placed (the data table names them all)."""
    named = [g for g in groups if g.slow]
    placed = [g.center for g in named]
    for group in groups:
        if not group.slow and all(abs(group.center - x) >= LABEL_GAP for x in placed):
            placed.append(group.center)
            named.append(group)
    parts = []
    for group in named:
        x, y = _px(group.center), _px(frame.y0 + 12)
        css = "node-label slow" if group.slow else "node-label"
        parts.append(f'<text class="{css}" x="{x}" y="{y}" text-anchor="end" transform="rotate(-35 {x} {y})">'
                     f'{esc(group.node or "(no node)")}</text>')
    return "".join(parts)


def _rank_title(value: RankValue, unit: str) -> str:
    shown = "no value" if value.value is None else f"{fmt_number(value.value)} {unit}".strip()
    slow = " (slow rank)" if value.slow else ""
    return f"rank {value.rank}, pod {value.pod or '?'}, node {value.node or '?'}: {shown}{slow}"


def _rank_attrs(value: RankValue) -> str:
    return (f'data-rank="{value.rank}" data-node="{esc(value.node)}"'
            + (' data-slow="true"' if value.slow else ""))


def _missing_mark(x: float, frame: Frame, value: RankValue, unit: str) -> str:
    return (f'<text class="rank missing" {_rank_attrs(value)} x="{_px(x)}" y="{_px(frame.y0 - 3)}" '
            f'text-anchor="middle">\u00d7<title>{esc(_rank_title(value, unit))}</title></text>')


def _bars(groups: Sequence[_Group], slot: float, frame: Frame, scale: Scale, unit: str) -> str:
    """One bar per rank; a slow rank's bar is drawn in the failure colour with a ▼ above it."""
    parts = []
    for group in groups:
        for index, value in enumerate(group.ranks):
            x = group.x_start + index * slot + slot * 0.1
            if value.value is None:
                parts.append(_missing_mark(x + slot * 0.4, frame, value, unit))
                continue
            top = scale(value.value)
            css = "rank bar slow" if value.slow else "rank bar"
            parts.append(f'<rect class="{css}" {_rank_attrs(value)} x="{_px(x)}" y="{_px(top)}" '
                         f'width="{_px(slot * 0.8)}" height="{_px(frame.y0 - top)}">'
                         f'<title>{esc(_rank_title(value, unit))}</title></rect>')
            if value.slow:
                parts.append(f'<text class="slow-mark" x="{_px(x + slot * 0.4)}" y="{_px(top - 3)}" '
                             f'text-anchor="middle" aria-hidden="true">▼</text>')
    return "".join(parts)


def _dots(groups: Sequence[_Group], slot: float, frame: Frame, scale: Scale, unit: str) -> str:
    """One dot per rank (too many ranks for bars); a slow rank is a larger triangle. Each node gets
    a short line at its median, so a slow node stands out even where the dots crowd."""
    parts = []
    for group in groups:
        measured = sorted(v.value for v in group.ranks if v.value is not None)
        if measured:
            y = _px(scale(measured[len(measured) // 2]))
            parts.append(f'<line class="node-median" x1="{_px(group.x_start)}" x2="{_px(group.x_end)}" '
                         f'y1="{y}" y2="{y}"/>')
        for index, value in enumerate(group.ranks):
            x = group.x_start + (index + 0.5) * slot
            if value.value is None:
                parts.append(_missing_mark(x, frame, value, unit))
                continue
            y = scale(value.value)
            title = f"<title>{esc(_rank_title(value, unit))}</title>"
            if value.slow:
                parts.append(f'<path class="rank dot slow" {_rank_attrs(value)} '
                             f'd="M{_px(x)} {_px(y + 4)}l-4 -7h8z">{title}</path>')
            else:
                parts.append(f'<circle class="rank dot" {_rank_attrs(value)} cx="{_px(x)}" cy="{_px(y)}" '
                             f'r="{_px(min(2.5, max(1.2, slot * 0.45)))}">{title}</circle>')
    return "".join(parts)


def rank_chart(chart_id: str, values: Sequence[RankValue], unit: str, lines: Sequence[HLine],
               title: str, desc: str) -> str:
    """Per-rank values grouped by node: bars up to BAR_LIMIT ranks, dots beyond; 0-based y axis."""
    frame = Frame(WIDTH, 300.0, 84.0)
    top = max([v.value for v in values if v.value is not None] + [line.value for line in lines] + [0.0])
    scale = Scale(0.0, top * 1.08 or 1.0, frame.y0, frame.y1)
    groups, slot = _groups_by_node(values, frame)
    draw = _bars if len(values) <= BAR_LIMIT else _dots
    body = [y_axis(frame, scale, unit or "value"), draw(groups, slot, frame, scale, unit),
            hlines(frame, scale, lines), _node_labels(groups, frame)]
    return svg(chart_id, frame, title, desc, body)


# ---- line charts ----

@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    css: str  # s0..s7, optionally with " dashed"; "median"; "slow"
    markers: bool = False


@dataclass(frozen=True)
class Band:
    """A filled area between lower and upper, both over the same x values."""

    xs: Sequence[float]
    lower: Sequence[float]
    upper: Sequence[float]
    css: str = "band"


@dataclass(frozen=True)
class XSpan:
    """A shaded vertical strip, e.g. the message sizes a bandwidth check judges."""

    lo: float
    hi: float
    label: str


def series_css(index: int) -> str:
    """A distinct style for the index-th line: eight colours, then the same dashed."""
    return f"s{index % 8}" + (" dashed" if index % SERIES_STYLES >= 8 else "")


def thin(points: Sequence[tuple[float, float]], limit: int) -> list[tuple[float, float]]:
    """At most about `limit` points, evenly strided, the first and last always kept."""
    if len(points) <= limit:
        return list(points)
    stride = math.ceil(len(points) / limit)
    kept = list(points[::stride])
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def _polyline(points: Iterable[tuple[float, float]], x: Scale, y: Scale) -> str:
    return " ".join(f"{_px(x(px))},{_px(y(py))}" for px, py in points)


def _series_svg(series: Series, x: Scale, y: Scale) -> str:
    parts = [f'<polyline class="series {esc(series.css)}" fill="none" points="{_polyline(series.points, x, y)}">'
             f'<title>{esc(series.name)}</title></polyline>']
    if series.markers:
        parts.extend(f'<circle class="marker {esc(series.css)}" cx="{_px(x(px))}" cy="{_px(y(py))}" r="2.5"/>'
                     for px, py in series.points)
    return "".join(parts)


def _band_svg(band: Band, x: Scale, y: Scale) -> str:
    outline = list(zip(band.xs, band.upper, strict=True)) + list(zip(band.xs, band.lower, strict=True))[::-1]
    return f'<polygon class="{esc(band.css)}" points="{_polyline(outline, x, y)}"/>'


def _span_svg(span: XSpan, frame: Frame, x: Scale) -> str:
    left, right = x(span.lo), x(span.hi)
    if right - left < 6:  # a single size: widen so that it shows
        left, right = left - 3, right + 3
    return (f'<rect class="xspan" x="{_px(left)}" y="{_px(frame.y1)}" width="{_px(right - left)}" '
            f'height="{_px(frame.y0 - frame.y1)}"><title>{esc(span.label)}</title></rect>')


@dataclass(frozen=True)
class LineChart:
    chart_id: str
    title: str
    desc: str
    x_label: str
    y_label: str
    series: Sequence[Series]
    bands: Sequence[Band] = ()
    lines: Sequence[HLine] = ()
    spans: Sequence[XSpan] = ()
    log_x: bool = False
    zero_y: bool = False  # start the y axis at 0 (bandwidth) rather than at the data (loss)
    x_fmt: Callable[[float], str] | None = None  # default: tick_text


def _y_range(chart: LineChart) -> tuple[float, float]:
    ys = [p[1] for s in chart.series for p in s.points] + [v for b in chart.bands for v in (*b.lower, *b.upper)]
    ys += [line.value for line in chart.lines]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if chart.zero_y:
        lo = min(0.0, lo)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.1 or 1.0
    return (lo if chart.zero_y else lo - pad), hi + pad


def line_chart(chart: LineChart) -> str:
    """Lines (with optional markers), bands, horizontal reference lines and shaded x spans."""
    frame = Frame(WIDTH, 280.0, 40.0)
    xs = [p[0] for s in chart.series for p in s.points] + [x for b in chart.bands for x in b.xs]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (1.0, 2.0)
    if chart.log_x:
        x_lo, x_hi = max(x_lo, 1e-9), max(x_hi, x_lo * 2)
    x = Scale(x_lo, x_hi, frame.x0, frame.x1, log=chart.log_x)
    y_lo, y_hi = _y_range(chart)
    y = Scale(y_lo, y_hi, frame.y0, frame.y1)
    ticks = log2_ticks(x_lo, x_hi) if chart.log_x else [t for t in nice_ticks(x_lo, x_hi, 8) if x_lo <= t <= x_hi]
    body = [y_axis(frame, y, chart.y_label), x_axis(frame, x, ticks, chart.x_label, chart.x_fmt)]
    body += [_span_svg(span, frame, x) for span in chart.spans]
    body += [_band_svg(band, x, y) for band in chart.bands]
    body += [_series_svg(series, x, y) for series in chart.series]
    body.append(hlines(frame, y, chart.lines))
    return svg(chart.chart_id, frame, chart.title, chart.desc, body)


# ---- timeline ----

@dataclass(frozen=True)
class Mark:
    seconds: float  # from the start of the window
    label: str
    warning: bool = False


def timeline(chart_id: str, marks: Sequence[Mark], moments: Sequence[Mark], title: str, desc: str) -> str:
    """Events on a time axis (seconds): warnings as diamonds on the upper row, others as dots on
    the lower row; `moments` (the test's end, a failure) as labelled vertical lines."""
    frame = Frame(WIDTH, 120.0, 34.0)
    seconds = [m.seconds for m in (*marks, *moments)] or [0.0]
    lo, hi = min([*seconds, 0.0]), max(seconds)
    x = Scale(lo, hi if hi > lo else lo + 1.0, frame.x0, frame.x1)
    ticks = [t for t in nice_ticks(x.lo, x.hi, 8) if x.lo <= t <= x.hi]
    rows = {True: frame.y1 + 18, False: frame.y0 - 18}
    body = [x_axis(frame, x, ticks, "seconds since the test started"),
            f'<line class="axis" x1="{_px(frame.x0)}" x2="{_px(frame.x1)}" y1="{_px(frame.y0)}" '
            f'y2="{_px(frame.y0)}"/>',
            f'<text class="tick" x="{_px(frame.x0 - 4)}" y="{_px(rows[True])}" text-anchor="end" '
            f'dominant-baseline="middle">Warning</text>',
            f'<text class="tick" x="{_px(frame.x0 - 4)}" y="{_px(rows[False])}" text-anchor="end" '
            f'dominant-baseline="middle">Normal</text>']
    for moment in moments:
        px = _px(x(moment.seconds))
        body.append(f'<line class="moment" x1="{px}" x2="{px}" y1="{_px(frame.y1)}" y2="{_px(frame.y0)}">'
                    f'<title>{esc(moment.label)}</title></line>'
                    f'<text class="hline-label thr" x="{px}" y="{_px(frame.y1 - 2)}" text-anchor="middle">'
                    f'{esc(moment.label)}</text>')
    for mark in marks:
        px, py = x(mark.seconds), rows[mark.warning]
        shape = (f'<path class="event warning" d="M{_px(px)} {_px(py - 5)}l5 5l-5 5l-5 -5z">' if mark.warning
                 else f'<circle class="event" cx="{_px(px)}" cy="{_px(py)}" r="3">')
        body.append(shape + f"<title>{esc(mark.label)}</title>" + ("</path>" if mark.warning else "</circle>"))
    return svg(chart_id, frame, title, desc, body)
