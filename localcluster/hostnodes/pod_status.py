"""The status of a pod the node agent runs, as the kubelet reports it: container states, phase,
conditions, IPs (pods/status), and the kubelet's events (Started, BackOff, Failed).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from localcluster.control.api import ApiClient, ApiError

POD_CIDR_PREFIX = "10.244"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def agent_log(message: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} node-agent: {message}", flush=True, file=sys.stderr)


def pseudo_pod_ip(uid: str) -> str:
    """A stable address in the pod CIDR (status.podIP; the processes themselves use 127.0.0.1)."""
    digest = hashlib.sha256(uid.encode()).digest()
    return f"{POD_CIDR_PREFIX}.{digest[0]}.{1 + digest[1] % 254}"


@dataclass
class ContainerState:
    """What the pod's status says about one container."""

    name: str
    image: str
    init: bool
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> dict[str, Any] | None:
        return self.state.get("terminated")

    def status(self) -> dict[str, Any]:
        status = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.running,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.pid is not None:
            status["containerID"] = f"kt2t-local://{self.pid}"
        return status


@dataclass
class PodState:
    """The pod's containers and how far it got; the phase follows from them."""

    restart_policy: str
    init: list[ContainerState]
    main: list[ContainerState]
    initialized: bool = False
    started_at: str = field(default_factory=now_rfc3339)

    def phase(self, finished: bool, stopping: bool) -> str:
        init_failed = any((s.terminated or {}).get("exitCode", 0) != 0 for s in self.init)
        if init_failed and (self.restart_policy == "Never" or stopping):
            return "Failed"
        if not self.initialized:
            return "Pending"
        ended = [s.terminated for s in self.main]
        if all(ended):
            return "Succeeded" if all(t.get("exitCode") == 0 for t in ended if t) else "Failed"
        if finished:
            return "Failed"
        if any(s.running or s.restart_count or s.terminated for s in self.main):
            return "Running"
        return "Pending"

    def status(self, uid: str, phase: str) -> dict[str, Any]:
        ready = phase == "Running" and all(s.running for s in self.main)
        now = now_rfc3339()
        not_ready_reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"

        def condition(kind: str, ok: bool, reason: str = "") -> dict[str, str]:
            return {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now,
                    **({"reason": reason} if reason and not ok else {})}

        ip = pseudo_pod_ip(uid)
        return {
            "phase": phase,
            "conditions": [
                condition("PodScheduled", True),
                condition("Initialized", self.initialized, "ContainersNotInitialized"),
                condition("Ready", ready, not_ready_reason),
                condition("ContainersReady", ready, not_ready_reason),
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.started_at,
            "initContainerStatuses": [s.status() for s in self.init],
            "containerStatuses": [s.status() for s in self.main],
        }


class PodReporter:
    """Writes one pod's status (pods/status: the agent owns these pods' status) and its events."""

    def __init__(self, api: ApiClient, pod: dict[str, Any]) -> None:
        self.api = api
        meta = pod["metadata"]
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.node = pod["spec"].get("nodeName", "")
        self.lock = threading.Lock()

    def publish(self, status: Callable[[], dict[str, Any]]) -> None:
        """Computes and writes the status under one lock: a later status is never overwritten by
        an earlier one."""
        with self.lock:
            try:
                self.api.merge_patch("Pod", self.name, {"status": status()}, self.namespace, "status")
            except (ApiError, OSError) as error:
                if getattr(error, "status", None) != 404:
                    agent_log(f"status of pod {self.namespace}/{self.name}: {error}")

    def event(self, kind: str, reason: str, container: str | None, message: str) -> None:
        """An event of the pod, of one of its containers unless container is None."""
        stamp = now_rfc3339()
        involved = {"apiVersion": "v1", "kind": "Pod", "name": self.name, "namespace": self.namespace,
                    "uid": self.uid}
        if container is not None:
            involved["fieldPath"] = f"spec.containers{{{container}}}"
        try:
            self.api.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{self.name}.{os.urandom(8).hex()}", "namespace": self.namespace},
                "involvedObject": involved,
                "reason": reason, "message": message, "type": kind, "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": self.node},
            })
        except (ApiError, OSError) as error:
            agent_log(f"event {reason} of pod {self.namespace}/{self.name}: {error}")


def orphaned_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod an earlier agent process ran: its processes went with that agent."""
    now = now_rfc3339()
    statuses = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
                 "restartCount": 0, "state": {"terminated": {
                     "exitCode": 137, "reason": "Error", "finishedAt": now,
                     "message": "the node agent restarted while the container ran; it was stopped"}}}
                for c in pod["spec"]["containers"]]
    return {"phase": "Failed", "containerStatuses": statuses}
