"""Log capture: every container of every pod (and the previous instance of a restarted one),
streamed to files in parallel before anything is deleted, with memory bounded by the chunk size.

Files: <dest>/<pod>.log for a single-container pod, <pod>.<container>.log otherwise, and
<...>.previous.log for the instance before the last restart. Each starts with a header line
naming pod, node and container.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from harness.cluster.client import STREAM_CHUNK_BYTES, Cluster, describe_api_error, kubelet_unreachable
from harness.cluster.pods import node_of
from harness.cluster.resources import POD, Obj
from harness.errors import ApiError, ClusterError

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 16
HEADER_PREFIX = "=== "


@dataclass
class CapturedLog:
    """One container log on disk."""

    pod: str
    node: str
    container: str
    path: Path
    size: int = 0
    previous: bool = False
    error: str | None = None

    @property
    def header(self) -> str:
        which = " (previous instance)" if self.previous else ""
        return f"{HEADER_PREFIX}pod {self.pod} | node {self.node} | container {self.container}{which}"

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines of the log, read from the end of the file (the file may be huge)."""
        with self.path.open("rb") as handle:
            handle.seek(max(0, self.path.stat().st_size - 64 * 1024))
            data = handle.read().decode("utf-8", errors="replace").splitlines()
        body = [line for line in data if not line.startswith(HEADER_PREFIX)]
        return body[-lines:]

    def excerpt(self, head_bytes: int, tail_bytes: int) -> str:
        """The log capped for JUnit: head and tail kept, a pointer to the full file between."""
        with self.path.open("rb") as handle:
            handle.readline()  # our header
            if self.size <= head_bytes + tail_bytes:
                return handle.read().decode("utf-8", errors="replace")
            head = handle.read(head_bytes)
            handle.seek(-tail_bytes, 2)
            tail = handle.read()
        omitted = self.size - len(head) - len(tail)
        return (head.decode("utf-8", errors="replace")
                + f"\n[... {omitted} bytes omitted; full log: {self.path} ...]\n"
                + tail.decode("utf-8", errors="replace"))


def log_file_name(pod: str, container: str, multi_container: bool, previous: bool) -> str:
    name = f"{pod}.{container}" if multi_container else pod
    return f"{name}.previous.log" if previous else f"{name}.log"


def _targets(pod: Obj, dest: Path) -> list[CapturedLog]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    containers = [c["name"] for c in (spec.get("initContainers") or []) + spec.get("containers", [])]
    restarts = {cs["name"]: cs.get("restartCount", 0)
                for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])}
    multi = len(containers) > 1
    name, node = pod["metadata"]["name"], node_of(pod)
    targets = []
    for container in containers:
        targets.append(CapturedLog(name, node, container, dest / log_file_name(name, container, multi, False)))
        if restarts.get(container, 0) > 0:
            targets.append(CapturedLog(name, node, container,
                                       dest / log_file_name(name, container, multi, True), previous=True))
    return targets


def _stream_to_file(cluster: Cluster, namespace: str, target: CapturedLog) -> CapturedLog:
    query: dict[str, str] = {"container": target.container}
    if target.previous:
        query["previous"] = "true"
    path = POD.object_path(target.pod, namespace) + "/log"
    with target.path.open("wb") as out:
        out.write(target.header.encode() + b"\n")
        try:
            response = cluster.open_stream(path, query, read_timeout=120,
                                           operation=f"read log of pod {target.pod}")
        except Exception as exc:
            # A container that never started has no log (400/404), nor can a node whose kubelet
            # is gone give one: say so in the file. Anything else (403: the tester lacks
            # pods/log) is an error the user must see.
            if not (isinstance(exc, ApiError) and (exc.status in (400, 404) or kubelet_unreachable(exc))):
                raise ClusterError(f"read log of pod {target.pod} container {target.container}: "
                                   f"{describe_api_error(exc)}") from None
            target.error = describe_api_error(exc)
            out.write(f"[no log: {target.error}]\n".encode())
            return target
        try:
            for chunk in response.stream(STREAM_CHUNK_BYTES, decode_content=True):
                out.write(chunk)
                target.size += len(chunk)
        finally:
            response.release_conn()
    return target


def capture_pod_logs(cluster: Cluster, namespace: str, pods: list[Obj], dest: Path,
                     workers: int = DEFAULT_WORKERS,
                     on_captured: Callable[[CapturedLog], None] | None = None) -> list[CapturedLog]:
    """Stream every container log of `pods` to files under `dest`, `workers` at a time;
    `on_captured` is called with each log once it is on disk (in the worker that read it), so what
    reads the logs can start while the others still arrive."""
    dest.mkdir(parents=True, exist_ok=True)
    targets = [t for pod in pods for t in _targets(pod, dest)]
    if not targets:
        return []

    def capture(target: CapturedLog) -> CapturedLog:
        captured = _stream_to_file(cluster, namespace, target)
        if on_captured is not None:
            try:
                on_captured(captured)
            except Exception:  # the log is on disk all the same; its reader reads it later
                log.warning("after capturing the log of %s/%s", target.pod, target.container, exc_info=True)
        return captured

    with ThreadPoolExecutor(max_workers=min(workers, len(targets)), thread_name_prefix="logs") as pool:
        futures = [pool.submit(capture, t) for t in targets]
        captured = []
        for target, future in zip(targets, futures, strict=True):
            try:
                captured.append(future.result())
            except ClusterError:
                raise
            except Exception as exc:  # one unreadable log must not lose the others
                target.error = f"{type(exc).__name__}: {exc}"
                log.warning("capture log of %s/%s: %s", target.pod, target.container, target.error)
                captured.append(target)
    return captured


class Heading(str, Enum):
    """How upstream's tests title a job's logs in their output (build-log readers look for these)."""

    TEST_LOG = "Test log for {job}:"  # the nvidia suite: t.Logf, once per job
    LOGS_FROM_POD = "Logs from Pod {pod}: "  # nvidia-training: fmt.Printf, once per pod


def console_text(captured: list[CapturedLog], job: str, heading: Heading, head_bytes: int, tail_bytes: int,
                 indent: str) -> str:
    """A job's logs for the console under upstream's heading, each capped like in JUnit."""
    if heading is Heading.LOGS_FROM_POD:
        return "\n".join(Heading.LOGS_FROM_POD.format(pod=entry.pod) + "\n" + entry.excerpt(head_bytes, tail_bytes)
                         for entry in captured if entry.path.exists())
    body = [Heading.TEST_LOG.format(job=job)]
    for entry in captured:
        if entry.path.exists():
            body += [entry.header, *entry.excerpt(head_bytes, tail_bytes).splitlines()]
    return "\n".join(indent + line for line in body)


def last_lines(captured: list[CapturedLog], pod: str, lines: int = 20) -> str:
    """The last lines of a pod's logs (each container), for a failure message."""
    parts = []
    for entry in captured:
        if entry.pod == pod and entry.path.exists():
            tail = entry.tail(lines)
            parts.append(f"last {len(tail)} lines of {entry.pod} ({entry.container}"
                         f"{', previous' if entry.previous else ''}):\n" + "\n".join(tail))
    return "\n".join(parts)
