"""The log of the operator that runs a job's owner, as far as it speaks of that job: what the JUnit
needs to tell why an operator's job never started or ended as it did (DLRover's ElasticJob
operator: LAUNCHER=dlrover). Read from a file when the operator runs outside the cluster (the local
cluster's, DLROVER_OPERATOR_LOG), else from its pods, as its published manifests install it; either
way only what it wrote since the job was launched, the lines naming the job or its namespace (an
operator serves every job of the cluster), saved whole to logs/operator-<name>.log and attached
to the JUnit's <system-out>. Nothing found is said there too, with where it was looked for."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cluster.labels import label_value
from harness.cluster.resources import POD
from harness.errors import ClusterError
from harness.framework.context import TestContext
from harness.jobs.launchers.base import OperatorLog

# What of the operator's lines goes into <system-out> (all of them are in the file).
JUNIT_OPERATOR_LINES = 200


@dataclass
class OperatorLogMark:
    """Where the operator's log stood when the job was launched: a file's size, or the time."""

    operator: OperatorLog
    file: Path | None
    offset: int
    started: float


def mark(t: TestContext, operator: OperatorLog) -> OperatorLogMark:
    """Called at launch: what `collect` reads from."""
    setting = getattr(t.cfg, operator.file_setting)
    file = Path(setting) if setting else None
    offset = file.stat().st_size if file is not None and file.is_file() else 0
    return OperatorLogMark(operator, file, offset, time.monotonic())


def about(lines: list[str], job_name: str, namespace: str) -> list[str]:
    """The lines that name the job or its namespace."""
    return [line for line in lines if job_name in line or namespace in line]


def _from_file(start: OperatorLogMark) -> tuple[list[str], str]:
    assert start.file is not None
    if not start.file.is_file():
        return [], f"no file {start.file}"
    with start.file.open("rb") as log:
        log.seek(start.offset if start.file.stat().st_size >= start.offset else 0)  # rotated: all of it
        text = log.read().decode(errors="replace")
    return text.splitlines(), f"file {start.file}"


def _from_pods(t: TestContext, start: OperatorLogMark) -> tuple[list[str], str]:
    operator = start.operator
    pods = t.cluster.list(POD, operator.namespace, label_selector=operator.selector).get("items", [])
    where = f"pods -n {operator.namespace} -l {operator.selector}, container {operator.container}"
    since = max(1, math.ceil(time.monotonic() - start.started) + 5)
    lines: list[str] = []
    for pod in pods:
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        if operator.container not in names:
            continue
        path = POD.object_path(pod["metadata"]["name"], operator.namespace) + "/log"
        try:
            response = t.cluster.open_stream(path, {"container": operator.container, "sinceSeconds": str(since)},
                                             read_timeout=60, operation=f"read the {operator.title}'s log")
        except Exception as exc:  # a log is evidence, not a verdict: say why it is missing
            lines.append(f"[no log of pod {pod['metadata']['name']}: {exc}]")
            continue
        try:
            lines += response.data.decode(errors="replace").splitlines()
        finally:
            response.release_conn()
    return lines, where if pods else f"no {where}"


def collect(t: TestContext, start: OperatorLogMark, job_name: str, namespace: str) -> None:
    """The operator's lines about the job since `mark`: into logs/operator-<name>.log and the JUnit."""
    try:
        lines, where = _from_file(start) if start.file is not None else _from_pods(t, start)
    except (OSError, ClusterError) as exc:
        lines, where = [], f"unreadable: {exc}"
    kept = about(lines, job_name, namespace)
    path = t.artifacts_dir / "logs" / f"operator-{label_value(start.operator.name)}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in kept))
    t.property(f"operator.{start.operator.name}.lines", len(kept))
    heading = (f"==== {start.operator.title}: {len(kept)} of its {len(lines)} lines since the launch name "
               f"{job_name} or namespace {namespace} (from {where}; all of them in {path}) ====")
    shown = kept[-JUNIT_OPERATOR_LINES:]
    cut = f"\n[the last {len(shown)} shown]" if len(shown) < len(kept) else ""
    t.attach_output(heading + cut + ("\n" + "\n".join(shown) if shown else ""))
