"""Stragglers: ranks far behind the others, judged against a robust reference and named by node.

In synchronous data-parallel training every rank waits for the slowest at each all-reduce, so the
ranks' throughputs come out nearly equal and a slow GPU or node shows as everyone slow. The ranks
are therefore compared on what no collective can slow down: the workloads' compute probe
(`probe_*` keys, measured on each rank before training) and their per-rank compute time
(`compute_ms_per_step`, forward and backward without the all-reduce); and on throughput too.

Which keys are compared: `probe_*` keys ending in a rate (`_tflops`, `_gbps`, `_per_s`: higher is
better) or a time (`_ms`, `_s`: lower is better); other probe keys describe the probe
(`probe_matmul_n`, `probe_seconds`) and are not compared. `compute_ms_per_step` (lower is better):
the mean of a time-boxed window of steps without the all-reduce (`compute_seconds` long), so it is
compared at any step time, GPU steps of a few ms included, when every rank's window lasted at least
MIN_COMPUTE_WINDOW_S; logs without `compute_seconds` (older workloads timed 3 steps) are compared
only from MIN_COMPARED_COMPUTE_MS a step up. And the workload's throughput key (higher is better).

The reference is the upper quartile of the ranks' values (the lower quartile for times), so a
minority of slow ranks, up to three of five, cannot drag it down as they would drag a median;
a rank is below the threshold under STRAGGLER_FRACTION x the reference (for times: above reference /
STRAGGLER_FRACTION).

Being below the threshold once is not yet evidence: one short probe on a busy host measured a
healthy rank at 0.66 of the other (2026-12-05, a fresh machine's main job). A rank is named only
when the evidence holds beyond the noise measured:
- **beyond its own spread**: the workloads time each probe and the compute window in PROBE_REPEATS
  slices and report `<key>_min`/`<key>_max` (workloads/probe.py); a rank is named on a key only when
  its value is beyond the threshold and even its best slice is slower than the reference: its whole
  range lies on the slow side. (Its best slice beyond the threshold too was tried first: a node
  slowed to half its time had one slice at 0.83 of the reference in 1 of 10 runs, 2 shared cores,
  bench/false_fails.py, while healthy ranks below the threshold had a slice above the reference.)
  A figure reported without its spread (older workloads, upstream's formats) is judged on its
  value, and the message says the spread is unknown.
- **where several signals exist, when they agree**: the compute signals (`probe_matmul_*`,
  `compute_ms_per_step`) and the throughput measure the same thing, the rank's compute speed. A rank
  is named on one of them only when every other compute signal compared shows it beyond its
  threshold too; the throughput, which synchronous training evens out, names a rank only when the
  compute signals (if any) agree. The transfer probe (`probe_h2d_gbps`: the PCIe link) stands alone.
A rank beyond a threshold but not named leaves the check passing, with the figures and why it could
not tell. Named ranks are grouped by node, with their pods, measured vs reference.

Nodes that report one `host_boot_id` (one kernel: the local cluster's real nodes, host-process
nodes) share the host's CPUs: on CPU ranks, each check's message says so, since a CPU figure there
moves with the other nodes' load.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from harness.metrics.records import RankMetrics
from harness.verdict.checks import Check, Status, Verdict, declare

STRAGGLER = declare(
    "straggler.<key>",
    "a node's ranks fall below `STRAGGLER_FRACTION` x the upper quartile of all ranks on the compute probe "
    "(`probe_matmul_tflops`, `probe_h2d_gbps`: measured before training, no collective can slow it), on "
    "`compute_ms_per_step` (above the lower quartile / fraction) or on throughput, **and the evidence holds beyond "
    "the noise**: each figure is the median of 5 slices timed apart, and even the rank's best slice is slower than "
    "the reference; the compute signals (probe, compute time, throughput) agree (the H2D probe stands alone). A rank "
    "below a threshold without that evidence passes, the message giving the figures and why it could not tell. Named "
    "by node, ranks, pods, measured vs reference; CPU ranks on nodes of one kernel (`host_boot_id`) are said to "
    "share one host's CPUs (bench/RESULTS.md, \"Straggler verdict\")",
    "`STRAGGLER_FRACTION`",
    settings=("STRAGGLER_FRACTION",),
)

RATE_SUFFIXES = {"_tflops": "TFLOP/s", "_gbps": "GB/s", "_per_s": "/s"}
TIME_SUFFIXES = {"_ms": "ms", "_s": "s"}
COMPUTE_TIME_KEY = "compute_ms_per_step"
HOST_KEY = "host_boot_id"
# What a compared key measures: signals of one kind must agree before a rank is named on one of them.
COMPUTE, TRANSFER, THROUGHPUT = "compute", "transfer", "throughput"
TRANSFER_SUFFIXES = ("_gbps",)
COMPUTE_WINDOW_KEY = "compute_seconds"
# A window of a second or more averages over hundreds of scheduling periods and, on GPUs, over
# enough steps that launch jitter cancels out: the mean is comparable whatever the step time.
MIN_COMPUTE_WINDOW_S = 1.0
# Logs without compute_seconds: the workloads timed 3 steps (workloads/probe.py); below 100 ms a
# step, that window is a few of a time-shared CPU's scheduling periods, and healthy ranks differed
# up to 4.9x (7 vs 34 ms) on the local cluster: compared only from this reference up (the probe always is).
MIN_COMPARED_COMPUTE_MS = 100.0
MAX_NAMED = 4  # nodes and pods named in one message


@dataclass(frozen=True)
class Compared:
    """A per-rank value compared across ranks: its key, its unit, which way is better and what it
    measures (COMPUTE, TRANSFER or THROUGHPUT)."""

    key: str
    unit: str
    higher_is_better: bool = True
    kind: str = THROUGHPUT


def compared_probe(key: str) -> Compared | None:
    """The probe key's comparison (module docstring), or None for a key that describes the probe."""
    if not key.startswith("probe_"):
        return None
    kind = TRANSFER if key.endswith(TRANSFER_SUFFIXES) else COMPUTE
    for suffix, unit in RATE_SUFFIXES.items():
        if key.endswith(suffix):
            return Compared(key, unit, True, kind)
    for suffix, unit in TIME_SUFFIXES.items():
        if key.endswith(suffix):
            return Compared(key, unit, False, kind)
    return None


def fmt(value: float) -> str:
    return f"{value:.4g}"


def rank_ranges(ranks: Iterable[int]) -> str:
    """`0-3, 8, 10-11`."""
    ordered = sorted(set(ranks))
    parts, start = [], None
    for i, rank in enumerate(ordered):
        start = rank if start is None else start
        if i + 1 == len(ordered) or ordered[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    return ", ".join(parts)


def where(rank: RankMetrics) -> str:
    return f"rank {rank.rank} (pod {rank.pod or '?'}, node {rank.node or '?'})"


def _reference(values: list[float], higher_is_better: bool, fraction: float) -> tuple[float, float, str]:
    """(reference, threshold, how) for the values of every rank."""
    lower, _, upper = statistics.quantiles(values, n=4, method="inclusive")
    if higher_is_better:
        return upper, upper * fraction, f"upper quartile x STRAGGLER_FRACTION {fraction:g}"
    return lower, lower / fraction, f"lower quartile / STRAGGLER_FRACTION {fraction:g}"


def _unreported(ranks: list[RankMetrics], key: str) -> list[str]:
    """Ranks without a finite value of `key`, each with why."""
    missing = []
    for rank in ranks:
        value = rank.values.get(key)
        if key in rank.nonfinite:
            missing.append(f"{where(rank)} {key} is NaN/inf")
        elif not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            missing.append(f"{where(rank)} reported no {key}")
    return missing


@dataclass
class Reading:
    """One key compared across every rank: the reference, the threshold and who is beyond it."""

    compared: Compared
    reference: float
    threshold: float
    how: str
    beyond: list[RankMetrics]  # ranks whose value is beyond the threshold
    ranks: int

    def value(self, rank: RankMetrics) -> float:
        return float(rank.values[self.compared.key])

    def is_beyond(self, value: float) -> bool:
        return self.is_slower(value, self.threshold)

    def is_slower(self, value: float, than: float) -> bool:
        return value < than if self.compared.higher_is_better else value > than

    def best(self, rank: RankMetrics) -> float | None:
        """The rank's best slice (highest rate, lowest time), or None when it reported no spread."""
        return _finite(rank.values.get(f"{self.compared.key}_{'max' if self.compared.higher_is_better else 'min'}"))

    def repeats(self, rank: RankMetrics) -> str:
        count = _finite(rank.values.get(f"{self.compared.key}_repeats"))
        return f"{int(count)} slices" if count is not None else "its slices"


def read(ranks: list[RankMetrics], compared: Compared, fraction: float) -> Reading:
    """The key's reading over every rank (each has reported a finite value: _unreported first)."""
    values = [float(r.values[compared.key]) for r in ranks]
    reference, threshold, how = _reference(values, compared.higher_is_better, fraction)
    reading = Reading(compared, reference, threshold, how, [], len(ranks))
    reading.beyond = [r for r in ranks if reading.is_beyond(reading.value(r))]
    return reading


def _why_not_named(rank: RankMetrics, reading: Reading, others: list[Reading]) -> str | None:
    """Why a rank beyond the reading's threshold is not evidence of a slow node, or None if it is."""
    best = reading.best(rank)
    if best is not None and not reading.is_slower(best, reading.reference):
        return (f"its best of {reading.repeats(rank)} was {fmt(best)} {reading.compared.unit}, as fast as the "
                f"reference")
    for other in others:
        if rank not in other.beyond:
            return (f"its {other.compared.key} ({fmt(other.value(rank))} {other.compared.unit}, threshold "
                    f"{fmt(other.threshold)}) does not agree")
    return None


def _agreeing(reading: Reading, readings: list[Reading]) -> list[Reading]:
    """The other readings that must agree before a rank is named on this one (module docstring)."""
    if reading.compared.kind == TRANSFER:
        return []
    return [r for r in readings if r is not reading and r.compared.kind == COMPUTE]


def _by_node(slow: list[RankMetrics], reading: Reading, others: list[Reading]) -> str:
    compared = reading.compared
    nodes: dict[str, list[RankMetrics]] = {}
    for rank in slow:
        nodes.setdefault(rank.node or "?", []).append(rank)
    parts = []
    for node, ranks in sorted(nodes.items(), key=lambda item: min(r.rank for r in item[1]))[:MAX_NAMED]:
        pods = list(dict.fromkeys(r.pod or "?" for r in ranks))
        median = statistics.median(reading.value(r) for r in ranks)
        bests = [b for r in ranks if (b := reading.best(r)) is not None]
        best = ((max if compared.higher_is_better else min)(bests) if len(bests) == len(ranks)
                else None)
        evidence = (f"even its best of {reading.repeats(ranks[0])}, {fmt(best)}, is slower than the reference"
                    if best is not None
                    else "one figure per rank: its spread is unknown")
        agreed = "".join(f"; {o.compared.key} {'median ' if len(ranks) > 1 else ''}"
                         f"{fmt(statistics.median(o.value(r) for r in ranks))} {o.compared.unit} "
                         f"(threshold {fmt(o.threshold)}) agrees" for o in others)
        parts.append(f"node {node} ({'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(r.rank for r in ranks)}, "
                     f"{'pod' if len(pods) == 1 else 'pods'} {', '.join(pods[:MAX_NAMED])}"
                     f"{' ...' if len(pods) > MAX_NAMED else ''}): {compared.key} "
                     f"{'median ' if len(ranks) > 1 else ''}{fmt(median)} {compared.unit} vs reference "
                     f"{fmt(reading.reference)} (threshold {fmt(reading.threshold)}: {reading.how}; "
                     f"{evidence}{agreed})")
    more = f"; and {len(nodes) - MAX_NAMED} more nodes" if len(nodes) > MAX_NAMED else ""
    return "straggler: " + "; ".join(parts) + more


def judge_reading(reading: Reading, readings: list[Reading], fraction: float, verdict: Verdict,
                  hosts_note: str = "") -> Check:
    """The reading's check: ranks beyond the threshold named where the evidence holds (module
    docstring); the reference lines go to the verdict for the report."""
    compared = reading.compared
    name = f"straggler.{compared.key}"
    verdict.references[compared.key] = {"reference": reading.reference, "threshold": reading.threshold,
                                        "how": reading.how}
    others = _agreeing(reading, readings)
    doubts = {r.rank: why for r in reading.beyond if (why := _why_not_named(r, reading, others)) is not None}
    named = [r for r in reading.beyond if r.rank not in doubts]
    if named:
        verdict.slow_ranks.update(r.rank for r in named)
        worst = (min if compared.higher_is_better else max)(reading.value(r) for r in named)
        return Check(name, Status.FAIL, _by_node(named, reading, others) + hosts_note,
                     measured=worst, expected=reading.threshold, unit=compared.unit, threshold=True)
    if not reading.beyond:
        return Check.passed(name, f"{compared.key} of all {reading.ranks} ranks within {fraction:g} of the reference "
                                  f"{fmt(reading.reference)} {compared.unit} ({reading.how}){hosts_note}")
    doubted = [f"{where(r)} {fmt(reading.value(r))} {compared.unit}: {doubts[r.rank]}"
               for r in reading.beyond[:MAX_NAMED]]
    return Check.passed(name, f"{compared.key}: no node named, the evidence does not hold beyond the noise: "
                              f"{len(reading.beyond)} of {reading.ranks} ranks below the threshold "
                              f"{fmt(reading.threshold)} {compared.unit} (reference {fmt(reading.reference)}, "
                              f"{reading.how}), but {'; '.join(doubted)}{hosts_note}")


def _cannot_compare(ranks: list[RankMetrics], compared: Compared) -> Check | None:
    """The check when the key cannot be compared (one rank, or a rank without the value), else None."""
    name = f"straggler.{compared.key}"
    if len(ranks) < 2:
        return Check.not_applicable(name, f"{len(ranks)} rank: no other rank to compare with")
    if missing := _unreported(ranks, compared.key):
        return Check.failed(name, f"stragglers cannot be judged on {compared.key}: " + "; ".join(missing[:MAX_NAMED]))
    return None


def shared_hosts_note(ranks: list[RankMetrics]) -> str:
    """`; nodes a, b share one host's CPUs (...)` when CPU ranks on several nodes report one kernel."""
    nodes_by_host: dict[str, set[str]] = {}
    for rank in ranks:
        host = rank.values.get(HOST_KEY)
        if isinstance(host, str) and host and rank.node and str(rank.values.get("device", "")).startswith("cpu"):
            nodes_by_host.setdefault(host, set()).add(rank.node)
    shared = [sorted(nodes) for nodes in nodes_by_host.values() if len(nodes) > 1]
    if not shared:
        return ""
    groups = "; ".join(f"nodes {', '.join(nodes[:MAX_NAMED])}" for nodes in sorted(shared))
    return (f" [{groups} share one host's CPUs (one kernel, {HOST_KEY}): their CPU figures move with each "
            f"other's load]")


def probes_reported(ranks: list[RankMetrics]) -> list[Compared]:
    """The compared probe keys any rank reported, in a stable order."""
    keys = sorted({key for rank in ranks for key in rank.values if compared_probe(key)})
    return [probe for key in keys if (probe := compared_probe(key)) is not None]


def judge_stragglers(ranks: list[RankMetrics], throughput: Compared | None, fraction: float,
                     probe_required: bool) -> Verdict:
    """Probe keys, compute time and throughput, each compared across ranks, a rank named only on
    evidence (module docstring).

    probe_required: the workload promises a probe (this project's workloads); without one the
    probe check fails. Upstream formats carry none: not applicable.
    """
    verdict = Verdict()
    probes = probes_reported(ranks)
    if not probes:
        message = "the workload reported no compute probe (probe_* keys)"
        verdict.add(Check.failed("straggler.probe", message) if probe_required and ranks else
                    Check.not_applicable("straggler.probe", "this log format carries no compute probe"))
    compared = [*probes]
    if (too_short := _compute_time_too_short(ranks)) is None:
        compared.append(Compared(COMPUTE_TIME_KEY, "ms", higher_is_better=False, kind=COMPUTE))
    else:
        verdict.add(Check.not_applicable(f"straggler.{COMPUTE_TIME_KEY}", too_short))
    if throughput is not None:
        compared.append(throughput)
    early = {item.key: check for item in compared if (check := _cannot_compare(ranks, item)) is not None}
    readings = [read(ranks, item, fraction) for item in compared if item.key not in early]
    note = shared_hosts_note(ranks)
    by_key = {r.compared.key: r for r in readings}
    for item in compared:
        verdict.add(early[item.key] if item.key in early else
                    judge_reading(by_key[item.key], readings, fraction, verdict, note))
    return verdict


def _compute_time_too_short(ranks: list[RankMetrics]) -> str | None:
    """Why the compute time is not compared (none reported, a window too short, or, for logs
    without a window, steps too short to measure), else None."""
    if not any(COMPUTE_TIME_KEY in r.values for r in ranks):
        return "the logs report no per-rank compute time"
    windows = [_finite(r.values.get(COMPUTE_WINDOW_KEY)) for r in ranks]
    if any(w is not None for w in windows):
        short = [f"{where(r)} {fmt(w)} s" if w is not None else f"{where(r)} reported no {COMPUTE_WINDOW_KEY}"
                 for r, w in zip(ranks, windows, strict=True) if w is None or w < MIN_COMPUTE_WINDOW_S]
        if short:
            return (f"the compute window is under {MIN_COMPUTE_WINDOW_S:g} s ({COMPUTE_WINDOW_KEY}) on "
                    f"{len(short)} of {len(ranks)} ranks: {'; '.join(short[:MAX_NAMED])}; the probe is compared")
        return None  # a time-boxed window on every rank: comparable at any step time
    times = sorted(t for r in ranks if (t := _finite(r.values.get(COMPUTE_TIME_KEY))) is not None)
    if len(times) == len(ranks) and len(times) >= 2:
        reference = statistics.quantiles(times, n=4, method="inclusive")[0]
        if reference < MIN_COMPARED_COMPUTE_MS:
            return (f"a step's compute time ({fmt(times[0])}-{fmt(times[-1])} ms) is too short to compare "
                    f"ranks (from a reference of {MIN_COMPARED_COMPUTE_MS:g} ms up, for logs without "
                    f"{COMPUTE_WINDOW_KEY}); the probe is compared")
    return None


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
