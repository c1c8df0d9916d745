"""A cluster's own baseline: the figures of a healthy run (BASELINE_OUT) and the floors a later run is
judged against (BASELINE x BASELINE_TOLERANCE), ahead of the node-type table.

The file is JSON Lines, one object a line, so a malformed one is named by its line number:
line 1 `{"kind": "kt2t-baseline", "version": 1}`, then one entry per test:
  {"node_type", "workload", "size", "test", "throughput_key", "throughput_per_gpu" (the lowest
   rank's), "step_ms" (median compute_ms_per_step), "nodes": {node: {"compute_ms_per_step",
   "probe_<key>": ...}} (medians of the node's ranks), "busbw_gbps" and "busbw_bytes" (the bus
   bandwidth at the sweep's largest message, and that size, when there was a sweep), "versions",
   "images"}.
A later run's entry is the one with its node type, workload and size (the last such line wins); its
bus bandwidth is judged against busbw_gbps x tolerance when its sweep's largest message is the same;
another node type, workload or size is not-applicable, saying which the file holds. Per node, a
node's compute time and probe figures are judged against its own baseline figures (relative to the
other nodes' margins: judge_nodes), so a node that slowed is named even when synchronous training
slowed every rank alike.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from harness.config.values import format_bytes
from harness.errors import ConfigError
from harness.metrics.records import RankMetrics, WorkloadMetrics
from harness.verdict.checks import Check, Verdict, declare
from harness.verdict.stragglers import COMPUTE_TIME_KEY, compared_probe, fmt
from harness.verdict.thresholds import Floor, ThroughputFloor

BASELINE_NODES = declare(
    "baseline.nodes",
    "with `BASELINE`: a node's compute time or probe figure is worse than its own baseline x `BASELINE_TOLERANCE`, "
    "beyond the other nodes (named, with the margin); not applicable without a baseline",
    "`BASELINE` x `BASELINE_TOLERANCE`",
    settings=("BASELINE", "BASELINE_TOLERANCE"),
    only_when="`BASELINE` is set",
)

KIND, VERSION = "kt2t-baseline", 1
REQUIRED = {"node_type": str, "workload": str, "throughput_key": str}
NUMBERS = ("throughput_per_gpu", "step_ms", "busbw_gbps", "busbw_bytes")
# A bus bandwidth floor taken from a baseline: its Floor.source starts with this.
BASELINE_SOURCE = "baseline "


class BaselineError(ConfigError):
    """The baseline file is malformed (a usage error: exit 2), naming the file and line."""


@dataclass(frozen=True)
class Entry:
    """One test's figures in a baseline."""

    node_type: str
    workload: str
    size: str | None
    throughput_key: str
    throughput_per_gpu: float | None = None
    step_ms: float | None = None
    busbw_gbps: float | None = None
    busbw_bytes: float | None = None
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True)
class Baseline:
    """A parsed baseline file and the tolerance it is judged with."""

    path: str
    entries: tuple[Entry, ...]
    tolerance: float = 0.9

    def entry(self, node_type: str | None, workload: str, size: str | None) -> tuple[Entry | None, str]:
        """The entry for this combination, or (None, why: what the file holds instead)."""
        matches = [e for e in self.entries if (e.node_type, e.workload, e.size) == (node_type, workload, size)]
        if matches:
            return matches[-1], ""
        held = ", ".join(sorted({f"{e.node_type} {e.workload}/{e.size}" for e in self.entries})) or "no entries"
        return None, (f"the baseline {self.path} has no {node_type} {workload}/{size} (it holds {held}): "
                      f"not applicable to this node type, workload or size")

    def throughput_floor(self, node_type: str | None, workload: str, size: str | None,
                         key: str) -> tuple[ThroughputFloor | None, str]:
        entry, why = self.entry(node_type, workload, size)
        if entry is None:
            return None, why
        if entry.throughput_per_gpu is None or entry.throughput_key != key:
            return None, f"the baseline {self.path} line {entry.line} has no {key}"
        value = entry.throughput_per_gpu * self.tolerance
        return ThroughputFloor(value, "baseline", (
            f"{self.path} line {entry.line}: {fmt(entry.throughput_per_gpu)} x BASELINE_TOLERANCE "
            f"{self.tolerance:g}")), ""


    def busbw_floor(self, node_type: str | None, workload: str, size: str | None,
                    sweep_max_bytes: int | None) -> tuple[Floor | None, str]:
        """The bus bandwidth this combination reached in the baseline, as a floor to judge the same
        sweep size against (x tolerance: check_floor), or (None, why)."""
        entry, why = self.entry(node_type, workload, size)
        if entry is None:
            return None, why
        if entry.busbw_gbps is None:
            return None, f"the baseline {self.path} line {entry.line} has no busbw_gbps"
        measured_at = int(entry.busbw_bytes) if entry.busbw_bytes is not None else None
        if measured_at is not None and sweep_max_bytes != measured_at:
            return None, (f"the baseline {self.path} line {entry.line} measured bus bandwidth at "
                          f"{format_bytes(measured_at)}, this sweep's largest message is "
                          f"{format_bytes(sweep_max_bytes or 0)}: not comparable")
        return Floor(entry.busbw_gbps, measured_at or sweep_max_bytes or 0,
                     f"{BASELINE_SOURCE}{self.path} line {entry.line}"), ""


def _fail(path: str, line: int, what: str) -> BaselineError:
    return BaselineError(f"--baseline {path} line {line}: {what}")


def _number(path: str, line: int, name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _fail(path, line, f"{name} is {value!r}, expected a number > 0 or null")
    return float(value)


def _entry(path: str, line: int, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise _fail(path, line, f"expected a JSON object (an entry), found {type(raw).__name__}")
    for key, kind in REQUIRED.items():
        if not isinstance(raw.get(key), kind):
            raise _fail(path, line, f"{key} is {raw.get(key)!r}, expected a {kind.__name__}")
    if raw.get("size") is not None and not isinstance(raw["size"], str):
        raise _fail(path, line, f"size is {raw['size']!r}, expected a string or null")
    nodes = raw.get("nodes") or {}
    if not isinstance(nodes, dict):
        raise _fail(path, line, f"nodes is {nodes!r}, expected {{node: {{figure: number}}}}")
    parsed_nodes: dict[str, dict[str, float]] = {}
    for node, figures in nodes.items():
        if not isinstance(figures, dict):
            raise _fail(path, line, f"nodes.{node} is {figures!r}, expected an object")
        parsed_nodes[str(node)] = {str(k): v for k, f in figures.items()
                                   if (v := _number(path, line, f"nodes.{node}.{k}", f)) is not None}
    numbers = {name: _number(path, line, name, raw.get(name)) for name in NUMBERS}
    return Entry(raw["node_type"], raw["workload"], raw.get("size"), raw["throughput_key"], **numbers,
                 nodes=parsed_nodes, line=line)


def load_optional(path: str | None, tolerance: float) -> Baseline | None:
    """The baseline at `path` (see load); None when no baseline is set (BASELINE unset, no --baseline)."""
    return load(path, tolerance) if path else None


@cache
def load(path: str, tolerance: float) -> Baseline:
    """The baseline at `path`; BaselineError (exit 2) naming the line when it is malformed."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise BaselineError(f"--baseline {path}: cannot read it ({err.strerror})") from err
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise _fail(path, number, f"not JSON ({err.msg} at column {err.colno})") from err
        if number == 1:
            if not isinstance(raw, dict) or raw.get("kind") != KIND or raw.get("version") != VERSION:
                raise _fail(path, 1, f"expected the header {{\"kind\": \"{KIND}\", \"version\": {VERSION}}}, "
                                     f"found {line[:120]!r} (write one with --baseline-out)")
            continue
        entries.append(_entry(path, number, raw))
    if not text.strip():
        raise _fail(path, 1, "the file is empty (write one with --baseline-out)")
    return Baseline(path, tuple(entries), tolerance)


def _median(ranks: list[RankMetrics], key: str) -> float | None:
    values = [float(v) for r in ranks if isinstance(v := r.values.get(key), int | float) and not isinstance(v, bool)]
    return statistics.median(values) if values else None


def node_figures(metrics: WorkloadMetrics) -> dict[str, dict[str, float]]:
    """Per node: the median over its ranks of the compute time and every compared probe key."""
    by_node: dict[str, list[RankMetrics]] = {}
    for rank in metrics.ranks:
        by_node.setdefault(rank.node or "?", []).append(rank)
    keys = [COMPUTE_TIME_KEY, *sorted({k for r in metrics.ranks for k in r.values if compared_probe(k)})]
    return {node: {key: value for key in keys if (value := _median(ranks, key)) is not None}
            for node, ranks in sorted(by_node.items())}


def entry_of(metrics: WorkloadMetrics, test: str, node_type: str | None, throughput_key: str,
             size: str | None, versions: dict[str, str], images: dict[str, str]) -> dict[str, Any]:
    """This run's baseline entry for one test (module docstring)."""
    throughputs = [float(v) for r in metrics.ranks
                   if isinstance(v := r.values.get(throughput_key), int | float) and not isinstance(v, bool)]
    sweep = metrics.sweep
    busbw = busbw_bytes = None
    if sweep is not None and sweep.rows:
        row = max(sweep.rows, key=lambda r: r.size)
        busbw = min(h.busbw for h in (row.out_of_place, row.in_place) if h is not None)
        busbw_bytes = row.size
    return {"node_type": node_type or "", "workload": metrics.workload, "size": size, "test": test,
            "throughput_key": throughput_key, "throughput_per_gpu": min(throughputs) if throughputs else None,
            "step_ms": _median(metrics.ranks, COMPUTE_TIME_KEY), "nodes": node_figures(metrics),
            "busbw_gbps": busbw, "busbw_bytes": busbw_bytes, "versions": versions, "images": images}


_STARTED: set[str] = set()  # files this process already wrote the header of


def append(path: str, entry: dict[str, Any]) -> None:
    """Add an entry to the run's baseline file; the first write of a run replaces the file."""
    mode = "a" if path in _STARTED else "w"
    with open(path, mode) as out:
        if mode == "w":
            out.write(json.dumps({"kind": KIND, "version": VERSION}) + "\n")
        out.write(json.dumps(entry, sort_keys=True) + "\n")
    _STARTED.add(path)


def judge_nodes(metrics: WorkloadMetrics, baseline: Baseline, node_type: str | None, size: str | None) -> Verdict:
    """baseline.nodes: each node's compute time and probes against its own baseline figures, as a
    margin (figure / baseline, inverted for times), compared with the median margin of every node on
    that figure: a node is slow below BASELINE_TOLERANCE x that median. What slows every node alike
    (a shared, loaded host; a new driver) moves the median and names no node (the throughput floor
    judges it); a node that slowed more than the others is named, with its margin and the median's."""
    name = "baseline.nodes"
    entry, why = baseline.entry(node_type, metrics.workload, size)
    if entry is None:
        return Verdict([Check.not_applicable(name, why)])
    margins: dict[str, dict[str, tuple[float, float, float]]] = {}  # key -> node -> (margin, now, before)
    absent = []
    for node, figures in node_figures(metrics).items():
        if node not in entry.nodes:
            absent.append(node)
            continue
        for key, value in figures.items():
            before = entry.nodes[node].get(key)
            if before is None or value <= 0:
                continue
            probe = compared_probe(key)
            lower_better = key == COMPUTE_TIME_KEY or (probe is not None and not probe.higher_is_better)
            margins.setdefault(key, {})[node] = (before / value if lower_better else value / before, value, before)
    where = f"{baseline.path} line {entry.line}"
    compared = {key: nodes for key, nodes in margins.items() if len(nodes) >= 2}
    if not compared:
        return Verdict([Check.not_applicable(name, f"fewer than 2 nodes of this run are in {where} (it holds "
                                                   f"{', '.join(sorted(entry.nodes)) or 'none'}): no node to compare")])
    slow = []
    for key, nodes in compared.items():
        median = statistics.median(m for m, _, _ in nodes.values())
        for node, (margin, value, before) in sorted(nodes.items()):
            if margin < baseline.tolerance * median:
                slow.append(f"node {node}: {key} {fmt(value)} vs baseline {fmt(before)} (margin {margin:.2f}x, "
                            f"the nodes' median margin {median:.2f}x, tolerance {baseline.tolerance:g})")
    extra = f"; not in the baseline: {', '.join(absent)}" if absent else ""
    if slow:
        return Verdict([Check.failed(name, "threshold: slower than its baseline, beyond the other nodes: "
                                     + "; ".join(slow[:4]) + extra, threshold=True)])
    counted = sum(len(nodes) for nodes in compared.values())
    return Verdict([Check.passed(name, f"{counted} per-node figures within {baseline.tolerance:g} of the nodes' "
                                       f"median margin against {where}{extra}")])
