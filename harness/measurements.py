"""A job's measurements: metrics read from its captured logs with each rank placed on its pod and
node, and recorded as JUnit properties (the aggregate of each metric and every rank's value)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from harness.logs import CapturedLog
from harness.metrics import WorkloadMetrics, _LogScan, combine, read_lines, scan_lines
from harness.testing import TestContext

# Not reported in the one-line summary: identities, not measurements.
UNSUMMARIZED = ("rank", "world_size", "params_checksum")


class LogScans:
    """Each log's metric lines, scanned as soon as the log is on disk (capture_pod_logs'
    on_captured, in its worker threads): at 1,000 pods the scanning overlaps the capture of the
    other logs instead of following all of it. A log not scanned yet is scanned when asked for."""

    def __init__(self) -> None:
        self._scans: dict[Path, _LogScan] = {}
        self._lock = threading.Lock()

    def add(self, entry: CapturedLog) -> None:
        """Scan a captured log (current instances only; a previous one holds no final metrics)."""
        if entry.previous or entry.error or not entry.path.exists():
            return
        scan = scan_lines(read_lines(entry.path), entry.pod)
        with self._lock:
            self._scans[entry.path] = scan

    def of(self, entry: CapturedLog) -> _LogScan:
        with self._lock:
            scan = self._scans.get(entry.path)
        return scan if scan is not None else scan_lines(read_lines(entry.path), entry.pod)


def job_metrics(captured: list[CapturedLog], locations: Mapping[int, tuple[str, str]],
                locations_win: bool = False, scans: LogScans | None = None) -> WorkloadMetrics:
    """The metrics of every rank in the logs (current instances only), located on pod and node;
    `scans` holds the logs already scanned while the others were captured.

    What a rank says of its node (NODE_NAME, else its hostname) is kept unless `locations_win`:
    mpirun's ranks get neither the worker's NODE_NAME nor its node's name as hostname (the
    worker pod's), while mpirun's slot mapping places them exactly.
    """
    logs = [entry for entry in captured if not entry.previous and entry.path.exists()]
    parsed = combine([(scans or LogScans()).of(entry) for entry in logs])
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
            if isinstance(value, (int, float, str)):
                t.property(f"rank.{rank.rank}.{key}", value)
        t.property(f"rank.{rank.rank}.node", rank.node or "?")
        t.property(f"rank.{rank.rank}.pod", rank.pod or "?")
    t.logf("metrics: %d ranks; %s", len(metrics.ranks), "; ".join(
        f"{k} median {v['median']:.4g} (min {v['min']:.4g}, max {v['max']:.4g})"
        for k, v in summary.items() if k not in UNSUMMARIZED))
