"""Pods with canned logs: fault injection and GPU output, by annotation (hack/README.md).

Every container's log is `localcluster/emulation/canned_logs/<name>.log`, written at once when the pod is bound, and
kwok's stages drive the pod (stage pod-ready waits for the annotation
`kubetest2-training.local/logs-ready`, as a kubelet starts containers only once it can log them).
`{index}` in a name is the pod's index in its job (an Indexed Job's completion index, an MPIJob
replica's index), so each pod of a large job can serve its own lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from localcluster.base.annotations import (
    CANNED_BECAUSE_ANNOTATION,
    CANNED_LOG_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    FAIL_ANNOTATION,
    JOB_INDEX_ANNOTATION,
    LOGS_READY_ANNOTATION,
    REPLICA_INDEX_LABEL,
)
from localcluster.control.api import ApiClient
from localcluster.emulation.gpu_sharing import PLACEHOLDERS, GpuSharing
from localcluster.hostnodes.cri_log import cri_lines, mark_exited
from localcluster.hostnodes.pod_files import PodFiles, all_containers, apply_logs

# The canned log of a pod whose failure is injected, unless the pod names one.
FAILURE_CANNED_LOG = "bert-mpirun-missing-env"
# The label kubetest2-training's harness puts on every pod of a job (harness/labels.py JOB_LABEL).
JOB_LABEL = "kubetest2-training/job"
# An annotation value becomes a file name: no path separators, no dot-dot.
CANNED_LOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Replaced in a canned log name by the pod's index in its job (pod_index).
INDEX_PLACEHOLDER = "{index}"
# A canned log may say, in its header, the exit status of the program it stands in for
# (`# CANNED EXIT 11: ...`): its pod then fails with that code, as the real program's would, so a
# verdict on the pod's phase (upstream's) sees the failure the log shows.
CANNED_EXIT = re.compile(r"^# CANNED EXIT (?P<code>\d{1,3})\b")


def declared_exit_code(lines: list[str]) -> int | None:
    """The exit status a canned log's header (its leading `#` lines) declares (CANNED_EXIT), or None."""
    for line in lines:
        if not line.startswith("#"):
            return None
        if match := CANNED_EXIT.match(line):
            return int(match["code"])
    return None


def pod_index(pod: dict[str, Any]) -> str | None:
    """The pod's index in its job: an Indexed Job's completion index, else an MPIJob replica's."""
    meta = pod["metadata"]
    index = (meta.get("annotations") or {}).get(JOB_INDEX_ANNOTATION)
    if index is None:
        index = (meta.get("labels") or {}).get(REPLICA_INDEX_LABEL)
    return index if index is not None and index.isdigit() else None


def canned_by_annotation(pod: dict[str, Any]) -> bool:
    annotations = pod["metadata"].get("annotations") or {}
    return FAIL_ANNOTATION in annotations or any(k.startswith(CANNED_LOG_ANNOTATION) for k in annotations)


def canned_because(pod: dict[str, Any]) -> str:
    """Why a pod the agent does not run gets canned logs (the node agent's module docstring)."""
    annotations = pod["metadata"].get("annotations") or {}
    asked = sorted(k for k in annotations if k == FAIL_ANNOTATION or k.startswith(CANNED_LOG_ANNOTATION))
    if asked:
        return "annotation " + ", ".join(asked)
    no_command = [c["name"] for c in all_containers(pod) if not c.get("command")]
    if no_command:
        return "no command (image entrypoint unknown here): container " + ", ".join(no_command)
    return "pod had started before this node agent saw it"


@dataclass(frozen=True)
class CannedPods:
    """Writes canned pods' logs and tells kwok they are in place."""

    api: ApiClient
    files: PodFiles
    canned_logs_dir: Path
    default_canned_log: str
    # The device plugin's sharing played here: `{gpu_uuid}` and `{compute_mode}` in a canned log.
    gpus: GpuSharing | None = None

    def serve(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        crash_loops = annotations.get(FAIL_ANNOTATION) == "crashloop"
        started = datetime.now(timezone.utc)
        entries = []
        exit_codes = []
        for container in all_containers(pod):
            name = container["name"]
            lines = self.lines(pod, name)
            exit_codes.append(declared_exit_code(lines))
            content = cri_lines(lines, started)
            container_dir = self.files.logs_dir(pod) / name
            container_dir.mkdir(parents=True, exist_ok=True)
            (container_dir / "0.log").write_text(content)
            entry: dict[str, Any] = {"containers": [name], "logsFile": str(container_dir / "0.log")}
            if crash_loops:
                # The crashed run's output, served for `kubectl logs --previous`; that run is over.
                (container_dir / "previous.log").write_text(content)
                mark_exited(container_dir / "previous.log")
                entry["previousLogsFile"] = str(container_dir / "previous.log")
            entries.append(entry)
        apply_logs(self.api, pod, entries)
        # The reason travels with the pod so the harness's execution_of reads it as `canned`.
        marks = {LOGS_READY_ANNOTATION: "true",
                 CANNED_BECAUSE_ANNOTATION: annotations.get(CANNED_BECAUSE_ANNOTATION) or canned_because(pod)}
        declared = next((code for code in exit_codes if code), None)
        if declared and FAIL_ANNOTATION not in annotations:
            # Set with logs-ready, in one patch: kwok runs the pod only once that is there, and then
            # ends it through pod-fail-exit-code instead of pod-complete.
            marks |= {FAIL_ANNOTATION: "exit-code", EXIT_CODE_ANNOTATION: str(declared)}
        if any(annotations.get(key) != value for key, value in marks.items()):
            self.api.merge_patch("Pod", meta["name"], {"metadata": {"annotations": marks}}, meta["namespace"])

    def ended(self, pod: dict[str, Any]) -> None:
        """kwok's stages finished a canned pod: its logs are complete, a follow may end there; its GPU is free."""
        if self.gpus is not None:
            self.gpus.release(pod["metadata"]["uid"])
        for container in all_containers(pod):
            log_file = self.files.logs_dir(pod) / container["name"] / "0.log"
            if log_file.exists():
                mark_exited(log_file)

    @staticmethod
    def log_of_set(folder: Path, job: str, container: str) -> Path:
        """A set of canned logs (a folder) serves a run of several tests: `<job>.<container>.log`,
        else `<job>.log` (the job label the harness puts on every pod), else `default.log`."""
        for candidate in (f"{job}.{container}.log", f"{job}.log", "default.log"):
            if CANNED_LOG_NAME.match(candidate) and (folder / candidate).is_file():
                return folder / candidate
        return folder / f"{job or 'default'}.log"

    def lines(self, pod: dict[str, Any], container: str) -> list[str]:
        annotations = pod["metadata"].get("annotations") or {}
        labels = pod["metadata"].get("labels") or {}
        if annotations.get(FAIL_ANNOTATION) == "image-pull":
            return []  # the container never ran
        name = annotations.get(f"{CANNED_LOG_ANNOTATION}-{container}") or annotations.get(CANNED_LOG_ANNOTATION)
        if not name:
            name = FAILURE_CANNED_LOG if FAIL_ANNOTATION in annotations else self.default_canned_log
        if INDEX_PLACEHOLDER in name:
            index = pod_index(pod)
            if index is None:
                return [f"kwok node agent: canned log {name!r} names the pod's index, and pod "
                        f"{pod['metadata']['name']} has none (no {JOB_INDEX_ANNOTATION} annotation, "
                        f"no {REPLICA_INDEX_LABEL} label)"]
            name = name.replace(INDEX_PLACEHOLDER, index)
        if not CANNED_LOG_NAME.match(name):
            return [f"kwok node agent: invalid canned log name {name!r}"]
        path = self.canned_logs_dir / f"{name}.log"
        if (self.canned_logs_dir / name).is_dir():
            path = self.log_of_set(self.canned_logs_dir / name, labels.get(JOB_LABEL, ""), container)
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return [f"kwok node agent: no canned log {name!r} (looked for {path})"]
        if self.gpus is not None and any(p in line for line in lines for p in PLACEHOLDERS):
            for placeholder, value in self.gpus.substitutions(pod).items():
                lines = [line.replace(placeholder, value) for line in lines]
        return lines
