"""A job's metrics: every rank's metric lines read from the job's captured logs (scanned while the
other logs are still being captured), each rank placed on its pod and node."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path

from harness.cluster.logs import CapturedLog
from harness.metrics.records import LogScan, WorkloadMetrics, combine, scan_file


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
