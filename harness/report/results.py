"""A test's result.json (docs/ARTIFACTS.md, schema 1): its outcome, checks, metrics, pods and
events, written when the test ends on every path, for the HTML report and offline tools.

The test fills a TestRecord while it runs (the job its pods and events, the verdict its checks
and metrics); the test context writes it. Paths inside are relative to the test's folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.cluster.logs import CapturedLog
from harness.cluster.pods import container_outcome, container_statuses, execution_of, node_of, phase_of
from harness.cluster.resources import Obj
from harness.config.artifacts import write_atomically
from harness.config.redaction import redact
from harness.config.settings import Resolved
from harness.metrics.records import RankMetrics, WorkloadMetrics, sweep_dict
from harness.report.junit import CaseResult
from harness.verdict.checks import Verdict

SCHEMA = 1
MAX_STEPS_PER_RANK = 1000  # [step, loss] pairs kept per rank (evenly thinned, first and last kept)
CANNED, REAL, CONTAINER, MIXED, NONE = "canned", "real", "container", "mixed", "none"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def combined_execution(executions: Iterable[str]) -> str:
    """canned, real (host processes), container (a real kubelet), mixed (more than one of those), or none
    (no pods)."""
    kinds = set(executions) - {NONE}
    if kinds == {MIXED} or len(kinds) > 1:
        return MIXED
    return next(iter(kinds), NONE)


@dataclass(frozen=True)
class MetricsMeta:
    """How to read a test's metrics: world size, the throughput key and its unit."""

    world_size: int | None = None
    throughput_key: str = ""
    throughput_unit: str = ""


@dataclass
class TestRecord:
    """What a test's result.json holds beyond its JUnit outcome, filled while it runs."""

    __test__ = False  # not a pytest test class
    started: datetime = field(default_factory=utc_now)
    failed_at: datetime | None = None
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    metrics: WorkloadMetrics | None = None
    meta: MetricsMeta = field(default_factory=MetricsMeta)
    verdict: Verdict = field(default_factory=Verdict)
    child_executions: set[str] = field(default_factory=set)

    def execution(self) -> str:
        return combined_execution([p["execution"] for p in self.pods.values()] + sorted(self.child_executions))

    def add_pods(self, pods: Iterable[Obj], logs: list[CapturedLog], test_dir: Path) -> None:
        for pod in pods:
            name = pod["metadata"]["name"]
            self.pods[name] = pod_entry(pod, [entry for entry in logs if entry.pod == name], test_dir)


def pod_entry(pod: Obj, logs: list[CapturedLog], test_dir: Path) -> dict[str, Any]:
    return {"name": pod["metadata"]["name"], "node": node_of(pod), "phase": phase_of(pod),
            "execution": execution_of(pod),
            "containers": [asdict(container_outcome(status)) for status in container_statuses(pod)],
            "logs": [_relative(entry.path, test_dir) for entry in logs if entry.path.exists()]}


def _relative(path: Path, folder: Path) -> str:
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.as_posix()


def event_entry(event: Obj) -> dict[str, Any]:
    involved = event.get("involvedObject", {})
    return {"time": event.get("lastTimestamp") or event.get("eventTime") or
            event.get("metadata", {}).get("creationTimestamp") or "",
            "type": event.get("type", ""), "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
            "reason": event.get("reason", ""), "message": event.get("message", "")}


def _thinned(steps: list[tuple[int, float | None]]) -> list[tuple[int, float | None]]:
    """At most MAX_STEPS_PER_RANK of a rank's (step, loss) pairs, evenly spread; the pairs themselves
    (JSON writes a tuple as an array), not copies: 8,000 ranks x 130 steps are a million of them."""
    if len(steps) > MAX_STEPS_PER_RANK:
        stride = (len(steps) - 1) / (MAX_STEPS_PER_RANK - 1)
        return [steps[round(i * stride)] for i in range(MAX_STEPS_PER_RANK)]
    return steps


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def rank_entry(rank: RankMetrics) -> dict[str, Any]:
    values = {k: (v if _finite(v) else None) for k, v in rank.values.items() if _finite(v) or v is None}
    return {"rank": rank.rank, "pod": rank.pod or "", "node": rank.node or "", "values": values,
            "steps": _thinned(rank.steps)}


def probe_key_and_unit(metrics: WorkloadMetrics) -> dict[str, str] | None:
    from harness.verdict.stragglers import probes_reported  # stragglers imports metrics, as this module does

    probes = probes_reported(metrics.ranks)
    first = next((p for p in probes if p.key == "probe_matmul_tflops"), probes[0] if probes else None)
    return {"key": first.key, "unit": first.unit} if first else None


def metrics_section(record: TestRecord) -> dict[str, Any] | None:
    metrics = record.metrics
    if metrics is None:
        return None
    section: dict[str, Any] = {
        "workload": metrics.workload, "world_size": record.meta.world_size,
        "throughput": {"key": record.meta.throughput_key, "unit": record.meta.throughput_unit},
        "ranks": [rank_entry(r) for r in sorted(metrics.ranks, key=lambda r: r.rank)],
        "aggregate": metrics.aggregate(),
        "references": {k: v for k, v in record.verdict.references.items() if k != "busbw"},
        "slow_ranks": sorted(record.verdict.slow_ranks),
        "busbw": record.verdict.references.get("busbw"),
    }
    if (probe := probe_key_and_unit(metrics)) is not None:
        section["probe"] = probe
    if metrics.sweep is not None and section["busbw"] is None:
        raw = sweep_dict(metrics.sweep)
        section["busbw"] = {"rows": raw["rows"], "floor_gbps": None, "floor_source": "", "judged_sizes": [],
                            "average_gbps": raw["average_gbps"], "operation": raw["operation"]}
    return section


def config_section(resolved: Mapping[str, Resolved]) -> dict[str, dict[str, str]]:
    return {name: {"value": str(redact(name, value.shown())), "source": value.origin.source.value,
                   "origin": value.origin.detail} for name, value in resolved.items()}


def result_document(binary: str, result: CaseResult, record: TestRecord,
                    resolved: Mapping[str, Resolved]) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": SCHEMA, "binary": binary, "test": result.name, "outcome": result.outcome.value,
        "message": result.message, "detail": result.detail, "started": rfc3339(record.started),
        "elapsed_s": round(result.elapsed, 3), "execution": record.execution(),
        "config": config_section(resolved),
        "checks": [check.as_dict() for check in record.verdict.checks],
        "metrics": metrics_section(record),
        "pods": sorted(record.pods.values(), key=lambda p: p["name"]),
        "events": sorted(record.events, key=lambda e: e["time"]),
    }
    if record.failed_at is not None:
        document["failed_at"] = rfc3339(record.failed_at)
    if (pairs := record.verdict.references.get("node_pairs")) is not None:
        document["node_pairs"] = pairs  # TestNodePairs: both passes' groups and each node's judgement
    return document


def write_result(path: Path, document: dict[str, Any]) -> None:
    """result.json, atomically, mode 0644 (never NaN or Infinity: those are null). Compact, one
    line: json's C encoder writes it (an indented document goes through its pure-Python encoder, and
    at 8,000 ranks was 45 MB of mostly indentation); `python -m json.tool` shows it indented."""
    write_atomically(path, (json.dumps(document, separators=(",", ":"), allow_nan=False) + "\n").encode())
