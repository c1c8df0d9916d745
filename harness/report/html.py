"""The report's HTML: the summary table, and per test its verdict, checks, config, charts, pods, events.

Every text that came from a run (names, messages, logs, config values) goes through `esc`, which
also drops what HTML cannot hold (lone surrogates, control characters, ANSI colour codes). Links
are relative (they resolve inside the artifacts folder, wherever it was downloaded to) and only to
files that exist there.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

from harness.report.charts import (
    Band,
    HLine,
    LineChart,
    Mark,
    RankValue,
    Series,
    XSpan,
    esc,
    fmt_bytes,
    fmt_number,
    line_chart,
    rank_chart,
    series_css,
    thin,
    timeline,
)
from harness.report.inputs import Check, ConfigValue, Event, Metrics, PairNode, Pod, Rank, TestResult
from harness.verdict.checks import EMULATED

LOSS_LINES_LIMIT = 16  # ranks drawn one line each up to this many; beyond, a band and the outliers
LOSS_POINTS_LIMIT = 240  # points per loss line (the data stays in result.json)
LOSS_OUTLIERS = 4
EVENTS_LIMIT = 200  # events listed around a failure (all of them are in events.txt)
PODS_OPEN_LIMIT = 32  # beyond this many pods the full table starts folded, the troubled ones above it
DETAIL_HEAD, DETAIL_TAIL = 4_000, 28_000  # characters of a failure's detail kept (start: reason, end: last lines)


def verdict_badge(outcome: str) -> str:
    return f'<span class="verdict {esc(outcome)}" data-verdict="{esc(outcome)}">{esc(outcome)}</span>'


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time (Z or offset, any fraction digits) as an aware datetime; None if unreadable."""
    text = text.strip().replace("Z", "+00:00").replace("z", "+00:00")
    if "." in text:  # Python before 3.11 takes at most 6 fraction digits
        head, _, tail = text.partition(".")
        digits = tail[:len(tail) - len(tail.lstrip("0123456789"))]  # the fraction's, not the offset's
        text = f"{head}.{digits[:6].ljust(6, '0')}{tail[len(digits):]}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Links:
    """Relative links from the report's folder to files of the artifacts folder."""

    artifacts: Path
    report_dir: Path

    def href(self, target: Path) -> str | None:
        """The link to `target`, or None when it is not a file inside the artifacts folder."""
        try:
            resolved = target.resolve()
            inside = resolved.is_relative_to(self.artifacts.resolve())
        except (OSError, ValueError):
            return None
        if not inside or not resolved.is_file():
            return None
        return quote(os.path.relpath(resolved, self.report_dir.resolve()).replace(os.sep, "/"), safe="/")

    def anchor(self, target: Path, text: str) -> str:
        href = self.href(target)
        if href is None:
            return f'<span class="missing-file" title="not in the artifacts folder">{esc(text)} (missing)</span>'
        return f'<a class="file" href="{esc(href)}">{esc(text)}</a>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], css: str = "", caption: str = "") -> str:
    """A table whose cells are already HTML (escaped by the caller)."""
    head = "".join(f"<th scope=\"col\">{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="{esc(css)}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def details(summary: str, body: str, is_open: bool = False, css: str = "") -> str:
    return (f'<details class="{esc(css)}"{" open" if is_open else ""}><summary>{summary}</summary>'
            f"{body}</details>")


# ---- the summary at the top ----

def key_figure(test: TestResult) -> str:
    """The test's headline number: median throughput, or the bus bandwidth average."""
    metrics = test.metrics
    if metrics is None:  # from JUnit: the first metric the JUnit summary would show
        from harness.report.junit import SUMMARY_METRICS

        key = next((k for k in SUMMARY_METRICS if f"metrics.{k}.median" in test.junit_properties), None)
        return esc(f"{key} {test.junit_properties[f'metrics.{key}.median']} (median)") if key else ""
    if metrics.busbw and metrics.busbw.average_gbps is not None:
        return esc(f"busbw {fmt_number(metrics.busbw.average_gbps)} GB/s")
    median = metrics.aggregate.get(metrics.throughput_key, {}).get("median")
    if median is None:
        values = [v for r in metrics.ranks if (v := r.values.get(metrics.throughput_key)) is not None]
        median = statistics.median(values) if values else None
    return "" if median is None else esc(f"{fmt_number(median)} {metrics.throughput_unit} (median)".strip())


def ranks_figure(test: TestResult) -> str:
    metrics = test.metrics
    if metrics is None or not metrics.ranks:
        return esc(test.junit_properties.get("metrics.ranks", ""))
    shown = f"{len(metrics.ranks)}" + (f" of {metrics.world_size}" if metrics.world_size else "")
    slow = f', <span class="slow-text">{len(metrics.slow_ranks)} slow</span>' if metrics.slow_ranks else ""
    return f'<span class="rank-count" data-ranks="{len(metrics.ranks)}">{esc(shown)}</span>{slow}'


def execution_badge(execution: str) -> str:
    if execution in ("canned", "mixed"):
        return (' <span class="badge canned" title="logs served by the local cluster, not a real run">'
                f"{esc(execution)}</span>")
    return ""


EMULATED_TITLE = "judged on the local cluster's emulated node capacity (kwok nodes), not on counted devices"


def emulated_badge(checks: Sequence[Check]) -> str:
    """A badge naming the checks judged on emulated node capacity; "" when none was."""
    names = [check.name for check in checks if check.execution == EMULATED]
    if not names:
        return ""
    return (f' <span class="badge emulated" title="{esc(EMULATED_TITLE)}: {esc(", ".join(names))}">'
            f"{EMULATED}</span>")


def summary_table(tests: Sequence[TestResult], anchors: dict[int, str]) -> str:
    """One row per test at the very top: verdict, name, time, ranks, headline figure, the reason."""
    rows = []
    for index, test in enumerate(tests):
        name = (f'<a href="#{anchors[index]}">{esc(test.test)}</a>{execution_badge(test.execution)}'
                f"{emulated_badge(test.checks)}")
        reason = f'<span class="reason {esc(test.outcome)}">{esc(test.message)}</span>' if test.message else ""
        rows.append((verdict_badge(test.outcome), esc(test.binary), name, esc(fmt_seconds(test.elapsed_s)),
                     ranks_figure(test), key_figure(test), reason))
    return table(("verdict", "binary", "test", "time", "ranks", "figure", "reason"), rows, css="summary",
                 caption="Tests of this run: binaries by name, each one's tests in the order they ran")


# ---- one test: verdict, failure, checks, config ----

def failure_box(test: TestResult) -> str:
    """The reason, at the top of the test's section; the whole failure text folded open below."""
    if test.outcome not in ("FAIL", "ERROR") and not test.message:
        return ""
    css = "failure" if test.outcome in ("FAIL", "ERROR") else "note"
    parts = [f'<div class="{css}" role="{"alert" if css == "failure" else "note"}">'
             f'<p class="message">{esc(test.message or "(no message)")}</p>']
    detail = test.detail
    if detail and detail.strip() != test.message.strip():
        if len(detail) > DETAIL_HEAD + DETAIL_TAIL:
            cut = len(detail) - DETAIL_HEAD - DETAIL_TAIL
            detail = (f"{detail[:DETAIL_HEAD]}\n[... {cut} characters cut: see the JUnit file ...]\n"
                      f"{detail[-DETAIL_TAIL:]}")
        parts.append(details("failure detail", f"<pre>{esc(detail)}</pre>", is_open=True))
    parts.append("</div>")
    return "".join(parts)


CHECK_ICONS = {"pass": "✓", "fail": "✗", "not-applicable": "\u2013", "informational": "i"}  # en dash


def check_item(check: Check) -> str:
    status = check.status if check.status in CHECK_ICONS else "unknown"
    figures = ""
    if check.measured is not None or check.expected is not None:
        measured = "?" if check.measured is None else fmt_number(check.measured)
        expected = "?" if check.expected is None else fmt_number(check.expected)
        figures = (f' <span class="figures">(measured {esc(measured)} vs expected {esc(expected)} '
                   f"{esc(check.unit)})</span>")
    return (f'<li class="check {status}" data-status="{esc(check.status)}">'
            f'<span class="icon" aria-hidden="true">{CHECK_ICONS.get(status, "?")}</span>'
            f'<span class="status">{esc(check.status)}</span> <b>{esc(check.name)}</b>{emulated_badge([check])} '
            f"{esc(check.message)}{figures}</li>")


def checks_section(checks: Sequence[Check]) -> str:
    if not checks:
        return ""
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "fail", "not-applicable", "informational")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f'<h3>Checks <small>({esc(summary)})</small></h3><ul class="checks">' + \
        "".join(check_item(c) for c in checks) + "</ul>"


def config_section(config: dict[str, ConfigValue], title: str) -> str:
    if not config:
        return ""
    rows = [(f"<code>{esc(name)}</code>", f"<code>{esc(v.value)}</code>", esc(v.source), esc(v.origin))
            for name, v in config.items()]
    return details(esc(title), table(("setting", "value", "source", "from"), rows, css="config"))


# ---- per-rank charts ----

def rank_values(metrics: Metrics, key: str) -> list[RankValue]:
    return [RankValue(r.rank, r.node, r.pod, r.values.get(key), r.rank in metrics.slow_ranks)
            for r in metrics.ranks if key in r.values]


def rank_lines(metrics: Metrics, key: str) -> list[HLine]:
    lines = []
    refs = metrics.references.get(key)
    if refs and refs.reference is not None:
        lines.append(HLine(refs.reference, f"reference {fmt_number(refs.reference)}", "ref"))
    if refs and refs.threshold is not None:
        lines.append(HLine(refs.threshold, f"straggler threshold {fmt_number(refs.threshold)}", "thr"))
    if metrics.minimum and metrics.minimum.key == key:
        lines.append(HLine(metrics.minimum.value, f"minimum {fmt_number(metrics.minimum.value)}", "min"))
    return lines


def node_pairs_section(nodes: Sequence[PairNode], chart_id: str) -> str:
    """TestNodePairs: per pass, each node's group bandwidth (slow groups marked, the pass's threshold
    drawn), and a table of both passes per node with the verdict."""
    if not nodes:
        return ""
    charts = []
    for p in (0, 1):
        values = [RankValue(i, n.node, f"with {n.partners[p]}", n.busbw_gbps[p], n.slow[p])
                  for i, n in enumerate(nodes)]
        threshold = next((n.thresholds[p] for n in nodes if n.thresholds[p] is not None), None)
        lines = [HLine(threshold, f"threshold {fmt_number(threshold)}", "thr")] if threshold is not None else []
        slow = [n.node for n in nodes if n.slow[p]]
        desc = (f"Pass {p + 1}: each node's pair all-reduce bus bandwidth (GB/s). Slow: "
                f"{', '.join(slow) or 'none'}.")
        charts.append(f"<figure>{rank_chart(f'{chart_id}-{p + 1}', values, 'GB/s', lines, f'Pass {p + 1}', desc)}"
                      f"</figure>")
    rows = [(esc(n.node), *(esc(f"{n.partners[p]}: " + ("no figure" if n.busbw_gbps[p] is None else
                                                        f"{fmt_number(n.busbw_gbps[p])} GB/s")
                                + (" (slow)" if n.slow[p] else "")) for p in (0, 1)),
             "FAIL: slow in both passes" if n.failed else "pass") for n in nodes]
    return ("<h3>Node pairs, both passes</h3>" + "".join(charts)
            + details("data table", table(("node", "pass 1", "pass 2", "verdict"), rows, css="data")))


def floor_line(metrics: Metrics, key: str, unit: str) -> str:
    """The floor judged on this key: its value, where it came from and the margin (lowest rank / floor)."""
    minimum = metrics.minimum
    if minimum is None or minimum.key != key:
        return ""
    margin = f"; margin {minimum.margin:.2f}x (lowest rank / floor)" if minimum.margin is not None else ""
    origin = f"from the {minimum.origin}: " if minimum.origin else ""
    return (f'<p class="floor">Floor {esc(fmt_number(minimum.value))} {esc(unit)} per GPU, {esc(origin)}'
            f'{esc(minimum.source)}{esc(margin)}</p>')


def _rank_table(values: Sequence[RankValue], unit: str, reference: float | None) -> str:
    rows = []
    for v in values:
        share = "" if v.value is None or not reference else f"{v.value / reference:.0%}"
        rows.append((esc(v.rank), esc(v.node), esc(v.pod),
                     esc("no value" if v.value is None else fmt_number(v.value)), esc(share),
                     '<span class="slow-text">slow</span>' if v.slow else ""))
    return table(("rank", "node", "pod", unit or "value", "of reference", "straggler"), rows, css="data")


def _rank_sentence(values: Sequence[RankValue], unit: str, reference: float | None) -> str:
    measured = [v for v in values if v.value is not None]
    nodes = len({v.node for v in values})
    text = f"{len(values)} ranks on {nodes} node{'s' if nodes != 1 else ''}"
    if measured:
        slowest = min(measured, key=lambda v: v.value or 0.0)
        text += f"; median {fmt_number(statistics.median(v.value or 0.0 for v in measured))} {unit}"
        share = f", {slowest.value / reference:.0%} of the reference" if reference and slowest.value else ""
        text += f"; slowest rank {slowest.rank} on node {slowest.node}: {fmt_number(slowest.value or 0.0)}{share}"
    missing = len(values) - len(measured)
    return text + (f"; {missing} rank(s) without a value" if missing else "")


def rank_section(metrics: Metrics, key: str, unit: str, heading: str, chart_id: str) -> str:
    """A per-rank chart (grouped by node, reference and threshold lines, slow ranks marked) with
    a sentence and a data table as its text alternative."""
    values = rank_values(metrics, key)
    if not values:
        return ""
    refs = metrics.references.get(key)
    reference = refs.reference if refs else None
    lines = rank_lines(metrics, key)
    slow = sorted(v.rank for v in values if v.slow)
    desc = (f"{heading} of each rank, grouped by node. " + _rank_sentence(values, unit, reference) + ". "
            + "; ".join(line.label for line in lines)
            + (f". Slow ranks (marked ▼, red): {', '.join(map(str, slow))}." if slow else ". No slow rank."))
    how = f'<p class="how">{esc(refs.how)}</p>' if refs and refs.how else ""
    how += floor_line(metrics, key, unit)
    title = f"{heading} per rank" + (f" ({unit})" if unit else "")
    chart = rank_chart(chart_id, values, unit, lines, title, desc)
    return (f"<h3>{esc(heading)} per rank</h3><p>{esc(_rank_sentence(values, unit, reference))}</p>{how}"
            f'<figure>{chart}</figure>' + details("data table", _rank_table(values, unit, reference)))


# ---- loss against step ----

def _envelope(ranks: Sequence[Rank]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per step (over the ranks that logged it): steps, min, median and max loss."""
    by_step: dict[float, list[float]] = {}
    for rank in ranks:
        for step, loss in rank.steps:
            by_step.setdefault(step, []).append(loss)
    steps = sorted(by_step)
    return (steps, [min(by_step[s]) for s in steps], [statistics.median(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def _loss_outliers(ranks: Sequence[Rank], slow: set[int]) -> list[Rank]:
    """Up to half of them slow ranks, the rest the ranks whose last loss is furthest from the median's."""
    median_last = statistics.median(r.steps[-1][1] for r in ranks)
    by_distance = sorted(ranks, key=lambda r: -abs(r.steps[-1][1] - median_last))
    chosen = [r for r in by_distance if r.rank in slow][: LOSS_OUTLIERS // 2]
    chosen += [r for r in by_distance if r not in chosen][: max(0, LOSS_OUTLIERS - len(chosen))]
    return sorted(chosen, key=lambda r: r.rank)


def _loss_band(ranks: Sequence[Rank], slow: set[int]) -> tuple[list[Series], list[Band], str]:
    steps, low, median, high = _envelope(ranks)
    stride = max(1, -(-len(steps) // LOSS_POINTS_LIMIT))
    keep = sorted(set(range(0, len(steps), stride)) | {len(steps) - 1})
    band = Band([steps[i] for i in keep], [low[i] for i in keep], [high[i] for i in keep])
    series = [Series(f"median of {len(ranks)} ranks", [(steps[i], median[i]) for i in keep], "median")]
    outliers = _loss_outliers(ranks, slow)
    series += [Series(f"rank {r.rank} (node {r.node})", thin(r.steps, LOSS_POINTS_LIMIT),
                      "slow" if r.rank in slow else series_css(i)) for i, r in enumerate(outliers)]
    desc = (f"Loss against step: the band spans the lowest to the highest loss of all {len(ranks)} ranks at "
            f"each step, the thick line is their median; drawn on their own: ranks "
            + ", ".join(str(r.rank) for r in outliers) + " (slow ranks and the last losses furthest from the median).")
    return series, [band], desc


def _loss_lines(ranks: Sequence[Rank], slow: set[int]) -> tuple[list[Series], list[Band], str]:
    series = [Series(f"rank {r.rank} (node {r.node})", thin(r.steps, LOSS_POINTS_LIMIT),
                     "slow" if r.rank in slow else series_css(i)) for i, r in enumerate(ranks)]
    desc = f"Loss against step, one line per rank ({len(ranks)} ranks)."
    return series, [], desc


def legend(series: Sequence[Series], bands: Sequence[Band]) -> str:
    items = [f'<li><svg class="swatch" viewBox="0 0 24 8" aria-hidden="true"><line class="series {esc(s.css)}" '
             f'x1="0" x2="24" y1="4" y2="4"/></svg>{esc(s.name)}</li>' for s in series]
    if bands:
        items.append('<li><svg class="swatch" viewBox="0 0 24 8" aria-hidden="true"><rect class="band" '
                     'width="24" height="8"/></svg>lowest to highest of all ranks</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


def _loss_table(ranks: Sequence[Rank]) -> str:
    rows = [(esc(r.rank), esc(r.node), esc(len(r.steps)), esc(fmt_number(r.steps[0][1])),
             esc(fmt_number(r.steps[-1][1])), esc(fmt_number(min(loss for _, loss in r.steps)))) for r in ranks]
    return table(("rank", "node", "steps logged", "first loss", "last loss", "lowest loss"), rows, css="data")


def loss_section(metrics: Metrics, chart_id: str, result_link: str) -> str:
    ranks = [r for r in metrics.ranks if r.steps]
    if not ranks:
        return ""
    draw = _loss_lines if len(ranks) <= LOSS_LINES_LIMIT else _loss_band
    series, bands, desc = draw(ranks, metrics.slow_ranks)
    chart = line_chart(LineChart(chart_id, "Loss against step", desc, "step", "loss", series, bands))
    return (f"<h3>Loss against step</h3><p>{esc(desc)} Every step of every rank: {result_link}.</p>"
            f"<figure>{chart}{legend(series, bands)}</figure>" + details("data table", _loss_table(ranks)))


# ---- bus bandwidth ----

def busbw_section(metrics: Metrics, chart_id: str) -> str:
    busbw = metrics.busbw
    if busbw is None:
        return ""
    series = [Series("out-of-place", [(r.size, r.out_of_place_gbps) for r in busbw.rows
                                      if r.out_of_place_gbps is not None], "s0", markers=True),
              Series("in-place", [(r.size, r.in_place_gbps) for r in busbw.rows
                                  if r.in_place_gbps is not None], "s1 dashed", markers=True)]
    floor = [HLine(busbw.floor_gbps, f"floor {fmt_number(busbw.floor_gbps)} GB/s", "floor")] \
        if busbw.floor_gbps is not None else []
    spans = [XSpan(min(busbw.judged_sizes), max(busbw.judged_sizes), "sizes the check judges")] \
        if busbw.judged_sizes else []
    desc = (f"Bus bandwidth (GB/s) against message size, {len(busbw.rows)} sizes from "
            f"{fmt_bytes(busbw.rows[0].size)} to {fmt_bytes(busbw.rows[-1].size)}, out-of-place and in-place"
            + (f"; floor {fmt_number(busbw.floor_gbps)} GB/s ({busbw.floor_source})" if busbw.floor_gbps else "")
            + (f"; average {fmt_number(busbw.average_gbps)} GB/s" if busbw.average_gbps is not None else "")
            + (f"; judged at {', '.join(fmt_bytes(s) for s in busbw.judged_sizes)}" if busbw.judged_sizes else ""))
    chart = line_chart(LineChart(chart_id, "Bus bandwidth against message size", desc, "message size", "GB/s",
                                 series, lines=floor, spans=spans, log_x=True, zero_y=True, x_fmt=fmt_bytes))
    judged = set(busbw.judged_sizes)
    rows = [(esc(fmt_bytes(r.size)), esc("" if r.out_of_place_gbps is None else fmt_number(r.out_of_place_gbps)),
             esc("" if r.in_place_gbps is None else fmt_number(r.in_place_gbps)), "judged" if r.size in judged else "")
            for r in busbw.rows]
    return (f"<h3>Bus bandwidth</h3><p>{esc(desc)}.</p><figure>{chart}{legend(series, [])}</figure>"
            + details("data table", table(("size", "out-of-place GB/s", "in-place GB/s", ""), rows, css="data")))


# ---- pods and events ----

def pod_troubled(pod: Pod) -> bool:
    return pod.phase in ("Failed", "Unknown", "Pending") or any(
        (c.exit_code not in (None, 0)) or c.restarts > 0 or c.signal for c in pod.containers)


def _container_cell(pod: Pod) -> str:
    parts = []
    for c in pod.containers:
        exit_text = "running" if c.exit_code is None else f"exit {c.exit_code}"
        extra = [c.reason] if c.reason else []
        extra += [f"signal {c.signal}"] if c.signal else []
        restarts = f'<span class="restarts">{c.restarts} restart{"s" if c.restarts != 1 else ""}</span>' \
            if c.restarts else ""
        parts.append(f'<span class="container">{esc(c.name)}: <span class="exit" data-exit="{esc(c.exit_code)}">'
                     f'{esc(exit_text)}</span> {esc(" ".join(extra))} {restarts}</span>')
    return "<br>".join(parts)


def _pod_rows(pods: Sequence[Pod], folder: Path, links: Links) -> list[tuple[str, ...]]:
    rows = []
    for pod in pods:
        logs = " ".join(links.anchor(folder / log, Path(log).name) for log in pod.logs) or "no log captured"
        name = f'<span class="{"pod troubled" if pod_troubled(pod) else "pod"}">{esc(pod.name)}</span>'
        rows.append((name, esc(pod.node), esc(pod.phase), esc(pod.execution), _container_cell(pod), logs))
    return rows


def pods_section(test: TestResult, links: Links) -> str:
    """Pods -> nodes with exit codes, restarts and links to every log file; troubled pods first
    when the table is long."""
    if not test.pods:
        return ""
    headers = ("pod", "node", "phase", "execution", "containers", "logs")
    troubled = [p for p in test.pods if pod_troubled(p)]
    every = table(headers, _pod_rows(test.pods, test.folder, links), css="pods")
    heading = f"<h3>Pods <small>({len(test.pods)}, {len(troubled)} with a failure or restart)</small></h3>"
    if len(test.pods) <= PODS_OPEN_LIMIT:
        return heading + every
    top = table(headers, _pod_rows(troubled, test.folder, links), css="pods") if troubled else ""
    return heading + top + details(f"all {len(test.pods)} pods", every)


def _failure_moment(test: TestResult, events: Sequence[Event]) -> datetime | None:
    """When the test failed: its first Warning event, else its end."""
    warning = next((parse_time(e.time) for e in events if e.type == "Warning" and parse_time(e.time)), None)
    if warning:
        return warning
    start = parse_time(test.started)
    return start + timedelta(seconds=test.elapsed_s) if start and test.elapsed_s is not None else None


def _events_window(test: TestResult) -> list[Event]:
    """All events, or for a long list the EVENTS_LIMIT nearest the failure."""
    events = test.events
    moment = _failure_moment(test, events) if test.outcome in ("FAIL", "ERROR") else None
    if len(events) <= EVENTS_LIMIT:
        return list(events)
    if moment is None:
        return list(events[-EVENTS_LIMIT:])
    def distance(e: Event) -> float:
        t = parse_time(e.time)
        return abs((t - moment).total_seconds()) if t else float("inf")
    return sorted(sorted(events, key=distance)[:EVENTS_LIMIT], key=lambda e: e.time)


def _timeline_chart(test: TestResult, events: Sequence[Event], chart_id: str) -> str:
    start = parse_time(test.started) or next((t for e in events if (t := parse_time(e.time))), None)
    if start is None:
        return ""
    marks = [Mark((t - start).total_seconds(), f"{e.time} {e.type} {e.object} {e.reason}: {e.message}",
                  e.type == "Warning") for e in events if (t := parse_time(e.time))]
    moments = [Mark(test.elapsed_s, "end" if test.outcome == "PASS" else test.outcome)] \
        if test.elapsed_s is not None else []
    warnings = sum(m.warning for m in marks)
    desc = f"{len(marks)} events over time, {warnings} warnings; the vertical line is the end of the test."
    return timeline(chart_id, marks, moments, "Events of the test's namespace", desc)


def events_section(test: TestResult, chart_id: str, links: Links) -> str:
    if not test.events:
        return ""
    shown = _events_window(test)
    start = parse_time(test.started)
    rows = []
    for e in shown:
        t = parse_time(e.time)
        offset = f"+{(t - start).total_seconds():.1f} s" if t and start else ""
        rows.append((esc(e.time), esc(offset), f'<span class="event-type {esc(e.type)}">{esc(e.type)}</span>',
                     esc(e.object), esc(e.reason), esc(e.message)))
    note = (f"<p>{len(shown)} of {len(test.events)} events, those nearest the failure; all of them: "
            f"{links.anchor(test.folder / 'events.txt', 'events.txt')}</p>") if len(shown) < len(test.events) else ""
    body = (f"<figure>{_timeline_chart(test, shown, chart_id)}</figure>{note}"
            + table(("time", "since start", "type", "object", "reason", "message"), rows, css="events"))
    failing = test.outcome in ("FAIL", "ERROR")
    return details(f"Events <small>({len(test.events)}, {sum(e.type == 'Warning' for e in test.events)} warnings)"
                   "</small>", body, is_open=failing, css="events-section")
