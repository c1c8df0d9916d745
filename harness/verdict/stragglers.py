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
a rank is slow below STRAGGLER_FRACTION x the reference (for times: above reference /
STRAGGLER_FRACTION). Slow ranks are grouped by node, with their pods, measured vs reference.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from harness.metrics.records import RankMetrics
from harness.verdict.checks import Check, Status, Verdict

RATE_SUFFIXES = {"_tflops": "TFLOP/s", "_gbps": "GB/s", "_per_s": "/s"}
TIME_SUFFIXES = {"_ms": "ms", "_s": "s"}
COMPUTE_TIME_KEY = "compute_ms_per_step"
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
    """A per-rank value compared across ranks: its key, its unit and which way is better."""

    key: str
    unit: str
    higher_is_better: bool = True


def compared_probe(key: str) -> Compared | None:
    """The probe key's comparison (module docstring), or None for a key that describes the probe."""
    if not key.startswith("probe_"):
        return None
    for suffix, unit in RATE_SUFFIXES.items():
        if key.endswith(suffix):
            return Compared(key, unit, True)
    for suffix, unit in TIME_SUFFIXES.items():
        if key.endswith(suffix):
            return Compared(key, unit, False)
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


def _by_node(slow: list[RankMetrics], compared: Compared, reference: float, threshold: float, how: str) -> str:
    nodes: dict[str, list[RankMetrics]] = {}
    for rank in slow:
        nodes.setdefault(rank.node or "?", []).append(rank)
    parts = []
    for node, ranks in sorted(nodes.items(), key=lambda item: min(r.rank for r in item[1]))[:MAX_NAMED]:
        pods = list(dict.fromkeys(r.pod or "?" for r in ranks))
        median = statistics.median(float(r.values[compared.key]) for r in ranks)
        parts.append(f"node {node} ({'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(r.rank for r in ranks)}, "
                     f"{'pod' if len(pods) == 1 else 'pods'} {', '.join(pods[:MAX_NAMED])}"
                     f"{' ...' if len(pods) > MAX_NAMED else ''}): {compared.key} "
                     f"{'median ' if len(ranks) > 1 else ''}{fmt(median)} {compared.unit} vs reference "
                     f"{fmt(reference)} (threshold {fmt(threshold)}: {how})")
    more = f"; and {len(nodes) - MAX_NAMED} more nodes" if len(nodes) > MAX_NAMED else ""
    return "straggler: " + "; ".join(parts) + more


def check_straggler(ranks: list[RankMetrics], compared: Compared, fraction: float, verdict: Verdict) -> Check:
    """One key compared across every rank; the reference lines go to the verdict for the report."""
    name = f"straggler.{compared.key}"
    if len(ranks) < 2:
        return Check.not_applicable(name, f"{len(ranks)} rank: no other rank to compare with")
    if missing := _unreported(ranks, compared.key):
        return Check.failed(name, f"stragglers cannot be judged on {compared.key}: " + "; ".join(missing[:MAX_NAMED]))
    values = [float(r.values[compared.key]) for r in ranks]
    reference, threshold, how = _reference(values, compared.higher_is_better, fraction)
    verdict.references[compared.key] = {"reference": reference, "threshold": threshold, "how": how}
    slow = [r for r in ranks if (float(r.values[compared.key]) < threshold if compared.higher_is_better
                                 else float(r.values[compared.key]) > threshold)]
    if not slow:
        return Check.passed(name, f"{compared.key} of all {len(ranks)} ranks within {fraction:g} of the reference "
                                  f"{fmt(reference)} {compared.unit} ({how})")
    verdict.slow_ranks.update(r.rank for r in slow)
    worst = (min if compared.higher_is_better else max)(float(r.values[compared.key]) for r in slow)
    return Check(name, Status.FAIL, _by_node(slow, compared, reference, threshold, how),
                 measured=worst, expected=threshold, unit=compared.unit, threshold=True)


def probes_reported(ranks: list[RankMetrics]) -> list[Compared]:
    """The compared probe keys any rank reported, in a stable order."""
    keys = sorted({key for rank in ranks for key in rank.values if compared_probe(key)})
    return [probe for key in keys if (probe := compared_probe(key)) is not None]


def judge_stragglers(ranks: list[RankMetrics], throughput: Compared | None, fraction: float,
                     probe_required: bool) -> Verdict:
    """Probe keys, compute time and throughput, each compared across ranks.

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
        compared.append(Compared(COMPUTE_TIME_KEY, "ms", higher_is_better=False))
    else:
        verdict.add(Check.not_applicable(f"straggler.{COMPUTE_TIME_KEY}", too_short))
    if throughput is not None:
        compared.append(throughput)
    for item in compared:
        verdict.add(check_straggler(ranks, item, fraction, verdict))
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
