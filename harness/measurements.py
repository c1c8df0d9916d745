"""A job's measurements and verdict recorded on its test: metrics read from the captured logs with
each rank placed on its pod and node, JUnit properties (every metric, every check), the test's log
and result.json; the verdict's first failing check fails the test."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from harness.checks import Verdict
from harness.logs import CapturedLog
from harness.metrics import LogScan, WorkloadMetrics, combine, scan_file
from harness.results import MetricsMeta
from harness.testing import TestContext
from harness.verdict import WORKLOADS, Expectation, judge_training

# Not reported in the one-line summary: identities, not measurements.
UNSUMMARIZED = ("rank", "world_size", "local_rank", "restart_count", "params_checksum", "steps_requested",
                "steps_completed", "probe_matmul_n")


class LogScans:
    """Each log's metric lines, scanned as soon as the log is on disk (capture_pod_logs'
    on_captured, in its worker threads): at 1,000 pods the scanning overlaps the capture of the
    other logs instead of following all of it. A log not scanned yet is scanned when asked for."""

    def __init__(self) -> None:
        self._scans: dict[Path, LogScan] = {}
        self._lock = threading.Lock()

    def add(self, entry: CapturedLog) -> None:
        """Scan a captured log (current instances only; a previous one holds no final metrics)."""
        if entry.previous or entry.error or not entry.path.exists():
            return
        scan = scan_log(entry)
        with self._lock:
            self._scans[entry.path] = scan

    def of(self, entry: CapturedLog) -> LogScan:
        with self._lock:
            scan = self._scans.get(entry.path)
        return scan if scan is not None else scan_log(entry)


def scan_log(entry: CapturedLog) -> LogScan:
    """A captured log's scan, its problems named by the log's file under the artifacts."""
    return scan_file(entry.path, f"logs/{entry.path.name}")


def job_metrics(captured: list[CapturedLog], locations: Mapping[int, tuple[str, str]],
                locations_win: bool = False, scans: LogScans | None = None) -> WorkloadMetrics:
    """The metrics of every rank in the logs (current instances only), located on pod and node;
    `scans` holds the logs already scanned while the others were captured.

    What a rank says of its node (NODE_NAME, else its hostname) is kept unless `locations_win`:
    mpirun's ranks get neither the worker's NODE_NAME nor its node's name as hostname (the
    worker pod's), while mpirun's slot mapping places them exactly.
    """
    logs = [entry for entry in captured if not entry.previous and entry.path.exists()]
    scans = scans or LogScans()
    parsed = combine([scans.of(entry) for entry in logs])
    for rank in parsed.ranks:
        pod, node = locations.get(rank.rank, (None, None))
        if locations_win and pod is not None:
            rank.pod, rank.node = pod, node
        else:
            rank.pod = rank.pod or pod
            rank.node = rank.node or node
    return parsed


def record_metrics(t: TestContext, metrics: WorkloadMetrics) -> None:
    """Metrics into the test's JUnit properties, and a one-line summary into its log."""
    t.property("metrics.workload", metrics.workload)
    t.property("metrics.ranks", len(metrics.ranks))
    summary = metrics.aggregate()
    for key, stats in summary.items():
        for stat, value in stats.items():
            t.property(f"metrics.{key}.{stat}", f"{value:.6g}")
    for rank in sorted(metrics.ranks, key=lambda r: r.rank):
        for key, value in rank.values.items():
            if isinstance(value, int | float | str):
                t.property(f"rank.{rank.rank}.{key}", value)
        t.property(f"rank.{rank.rank}.node", rank.node or "?")
        t.property(f"rank.{rank.rank}.pod", rank.pod or "?")
    if metrics.sweep is not None and metrics.sweep.average is not None:
        t.property("metrics.busbw.average_gbps", metrics.sweep.average)  # a property only, never judged
    t.logf("metrics: %d ranks; %s", len(metrics.ranks), "; ".join(
        f"{k} median {v['median']:.4g} (min {v['min']:.4g}, max {v['max']:.4g})"
        for k, v in summary.items() if k not in UNSUMMARIZED))


def record_verdict(t: TestContext, verdict: Verdict, metrics: WorkloadMetrics | None = None,
                   meta: MetricsMeta | None = None) -> None:
    """Every check into the JUnit properties, the test's log and result.json; then the first failing
    check (if any) fails the test."""
    t.record.verdict.extend(verdict)
    if metrics is not None:
        t.record.metrics, t.record.meta = metrics, meta or t.record.meta
    for key, value in t.record.verdict.properties().items():
        t.property(key, value)
    for line in verdict.lines():
        t.logf("%s", line)
    t.logf("verdict: %s", t.record.verdict.summary())
    verdict.raise_if_failed()


def training_verdict(t: TestContext, metrics: WorkloadMetrics, world_size: int,
                     workload: str) -> tuple[Verdict, MetricsMeta]:
    """The training verdict of a job's metrics (harness.verdict.judge_training, as the offline
    `python -m harness.verdict` runs it) with this test's expectations, and how to read the metrics."""
    spec = WORKLOADS[workload]
    expect = Expectation(t.name, spec, world_size, t.topology.node_type, t.cfg.straggler_fraction,
                         t.cfg.min_throughput_per_gpu)
    return judge_training(metrics, expect), MetricsMeta(world_size, spec.throughput_key, spec.unit)


def assess_training(t: TestContext, metrics: WorkloadMetrics, world_size: int, workload: str) -> None:
    """training_verdict recorded on the test (which fails on the first failing check)."""
    verdict, meta = training_verdict(t, metrics, world_size, workload)
    record_verdict(t, verdict, metrics, meta)
