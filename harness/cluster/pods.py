"""What an object's status says: a pod's node, containers and failure, a job's conditions."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from harness.cluster.resources import Obj

# Waiting reasons that end a pod's chances at once, and those given a grace period (image pulls
# can be slow or transiently rate-limited). ErrImageNeverPull is final: with imagePullPolicy Never
# the kubelet will never fetch the image, so waiting POD_FAILURE_GRACE only delays the failure.
FATAL_WAITING = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "InvalidImageName",
                           "CreateContainerError", "RunContainerError", "ErrImageNeverPull"})
GRACED_WAITING = frozenset({"ImagePullBackOff", "ErrImagePull"})

# How long a condition of a pod has held: (marker, now) -> seconds since the marker was first seen.
HeldFor = Callable[[str, float], float]


# The local cluster's annotations (hack/README.md): a canned log or an injected failure, and the
# mark of a pod its node agent really ran.
LOCAL_CLUSTER = "kubetest2-training.local/"
CANNED_LOG_ANNOTATION = LOCAL_CLUSTER + "canned-log"
FAIL_ANNOTATION = LOCAL_CLUSTER + "fail"
EXECUTED_ANNOTATION = LOCAL_CLUSTER + "executed-by"
# Set by the node agent on every pod it served canned logs, with the reason (one with a container
# without a command has no other local-cluster annotation).
CANNED_BECAUSE_ANNOTATION = LOCAL_CLUSTER + "canned-because"
# mpi-operator v2beta1 labels every pod of an MPIJob with its role.
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"


# DLRover's ElasticJob pods: its operator labels the master `dlrover-master`, the master labels the
# workers it creates `worker`, and each worker's rank (kept by a relaunched pod) in the second label.
DLROVER_REPLICA_TYPE_LABEL = "elasticjob.dlrover/replica-type"
DLROVER_RANK_LABEL = "elasticjob.dlrover/rank-index"
DLROVER_ROLES = {"dlrover-master": "launcher", "worker": "worker"}


def pod_role(pod: Obj) -> str | None:
    """`launcher` (an MPIJob's mpirun pod, an ElasticJob's DLRover master: a pod that runs no rank),
    `worker`, or None for a pod of neither kind (an Indexed Job's, a JobSet's: every pod a worker)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    if MPI_ROLE_LABEL in labels:
        return str(labels[MPI_ROLE_LABEL])
    return DLROVER_ROLES.get(labels.get(DLROVER_REPLICA_TYPE_LABEL, ""))


def execution_of(pod: Obj) -> str:
    """How the pod ran: `real` when the local cluster's node agent ran its command as a host process (the
    `executed-by` annotation it sets), `canned` when the local cluster served the pod's log or failure
    instead of running it (the `canned-log[-<container>]` or `fail` annotation, or the agent's
    `canned-because`, which also marks a pod canned because a container has no command), else `container`: a real
    kubelet ran the pod's images (the local cluster's real nodes, and every node of a real cluster)."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    if EXECUTED_ANNOTATION in annotations:
        return "real"
    canned = any(key.startswith(CANNED_LOG_ANNOTATION) or key in (FAIL_ANNOTATION, CANNED_BECAUSE_ANNOTATION)
                 for key in annotations)
    return "canned" if canned else "container"


def node_of(pod: Obj) -> str:
    return pod.get("spec", {}).get("nodeName") or "<unscheduled>"


def container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status", {})
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def container_running(pod: Obj, container: str | None = None) -> bool:
    """Whether the container runs now: the one named, else the pod's one container (the one the API
    server picks when a request names none)."""
    if container:
        chosen = [cs for cs in container_statuses(pod) if cs.get("name") == container]
    else:
        chosen = (pod.get("status", {}).get("containerStatuses") or [])[:1]
    return any("running" in (cs.get("state") or {}) for cs in chosen)


def phase_of(pod: Obj) -> str:
    """The pod's phase ("" before the API server set one)."""
    return pod.get("status", {}).get("phase", "")


def termination(cs: Obj) -> Obj | None:
    """How a container ended: its current state's termination, else its last one (restarted since)."""
    return cs.get("state", {}).get("terminated") or cs.get("lastState", {}).get("terminated")


def termination_signal(terminated: Mapping[str, Any]) -> int | None:
    """The signal that ended a container: the runtime's `signal`, else an exit code of 128+N."""
    if isinstance(terminated.get("signal"), int) and terminated["signal"]:
        return int(terminated["signal"])
    code = terminated.get("exitCode")
    if isinstance(code, int) and 128 < code < 128 + 65:
        try:
            signal.Signals(code - 128)
        except ValueError:
            return None
        return code - 128
    return None


@dataclass(frozen=True)
class ContainerOutcome:
    """What a container's status says of it: its exit code and signal (when it ended), the reason it
    ended or waits, and its restarts."""

    name: str
    exit_code: int | None
    reason: str
    restarts: int
    signal: int | None


def container_outcome(cs: Obj) -> ContainerOutcome:
    terminated = termination(cs) or {}
    waiting = cs.get("state", {}).get("waiting") or {}
    return ContainerOutcome(cs.get("name", ""), terminated.get("exitCode"),
                            terminated.get("reason") or waiting.get("reason") or "", cs.get("restartCount", 0),
                            termination_signal(terminated))


def run_interval(pod: Obj) -> tuple[float, float] | None:
    """When the pod's containers ran (epoch seconds): the first start and the last finish of its
    terminated containers (init containers aside); None until every container has terminated."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ended = [(cs.get("state") or {}).get("terminated") or {} for cs in statuses]
    if not ended or not all(e.get("startedAt") and e.get("finishedAt") for e in ended):
        return None
    return (min(_epoch(e["startedAt"]) for e in ended), max(_epoch(e["finishedAt"]) for e in ended))


def _epoch(stamp: str) -> float:
    """An RFC 3339 time of the API (`2026-12-02T07:00:00Z`) in epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def true_condition(obj: Obj | None, *types: str) -> Obj | None:
    """The first condition of one of `types` whose status is True, if any."""
    for cond in (obj or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") in types and cond.get("status") == "True":
            return cond
    return None


def conditions_text(obj: Obj) -> str:
    """The types of an object's True conditions (`Complete`, `Failed`), or `no condition yet`."""
    conditions = obj.get("status", {}).get("conditions") or []
    true = [c["type"] for c in conditions if c.get("status") == "True"]
    return ", ".join(true) or "no condition yet"


def describe_pod(pod: Obj) -> str:
    """One line: phase, node, each container's waiting or terminated state and restarts."""
    status = pod.get("status", {})
    parts = [status.get("phase", "Pending"), f"node {node_of(pod)}"]
    for cs in container_statuses(pod):
        state = cs.get("state", {})
        if "waiting" in state:
            parts.append(f"{cs['name']} waiting: {state['waiting'].get('reason', '')}")
        elif "terminated" in state:
            t = state["terminated"]
            parts.append(f"{cs['name']} terminated: {t.get('reason', '')} exit {t.get('exitCode')}")
        if cs.get("restartCount"):
            parts.append(f"{cs['name']} restarts {cs['restartCount']}")
    return ", ".join(parts)


def _container_failure(pod: Obj, cs: Obj, now: float, grace: float, held_for: HeldFor) -> str | None:
    """Why a container ends its pod's chances: OOMKilled, a fatal waiting reason, or a graced
    one (image pulls) held past `grace`."""
    meta = pod["metadata"]
    where = f"pod {meta['name']} on node {node_of(pod)}"
    terminated = termination(cs)
    if terminated and terminated.get("reason") == "OOMKilled":
        return (f"pod {meta['name']} OOMKilled on node {node_of(pod)} "
                f"(container {cs['name']}, exit code {terminated.get('exitCode')})")
    waiting = cs.get("state", {}).get("waiting") or {}
    reason = waiting.get("reason", "")
    if reason in FATAL_WAITING:
        return f"{where}: container {cs['name']} {reason}: {waiting.get('message', '')}".rstrip(": ")
    if reason in GRACED_WAITING:
        held = held_for(f"{meta['uid']}/{cs['name']}/image", now)
        if held >= grace:
            return (f"{where}: container {cs['name']} {reason} for {held:.0f}s: "
                    f"{waiting.get('message', '')}").rstrip(": ")
    return None


def _phase_failure(pod: Obj) -> str | None:
    """Why a pod in phase Failed failed: the first container that exited non-zero, else the pod's reason."""
    status = pod.get("status", {})
    if status.get("phase") != "Failed":
        return None
    where = f"pod {pod['metadata']['name']} on node {node_of(pod)}"
    for cs in container_statuses(pod):
        terminated = cs.get("state", {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return (f"{where} failed: container {cs['name']} exited with code "
                    f"{terminated.get('exitCode')} ({terminated.get('reason', 'Error')})")
    return f"{where} failed: {status.get('reason', '')} {status.get('message', '')}".strip()


def unschedulable_message(pod: Obj) -> str | None:
    """The scheduler's message while it cannot place the pod (PodScheduled False, Unschedulable)."""
    conditions = pod.get("status", {}).get("conditions") or []
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if not (scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"):
        return None
    return str(scheduled.get("message", ""))


def _unschedulable(pod: Obj, now: float, grace: float, held_for: HeldFor) -> str | None:
    """The scheduler's reason, once a pod has been unschedulable for `grace`."""
    message = unschedulable_message(pod)
    if message is None:
        return None
    held = held_for(f"{pod['metadata']['uid']}/unschedulable", now)
    if held < grace:
        return None
    return f"pod {pod['metadata']['name']} unschedulable for {held:.0f}s: {message}".rstrip(": ")


def _disrupted(pod: Obj) -> str | None:
    """Why the cluster took a pod away while it ran (a drain's eviction, preemption, a taint's
    deletion): the DisruptionTarget condition the API sets on a pod it deletes for the cluster's
    sake, never on one a user (or the harness's cleanup) deleted."""
    condition = true_condition(pod, "DisruptionTarget")
    if condition is None:
        return None
    return (f"pod {pod['metadata']['name']} on node {node_of(pod)} was taken away while it ran: "
            f"{condition.get('reason', 'DisruptionTarget')}: {condition.get('message', '')}").rstrip(": ")


def pod_failure_reason(pod: Obj, now: float, grace: float, held_for: HeldFor) -> str | None:
    """Why this pod has failed (or will never run), or None while it still may succeed."""
    if pod["metadata"].get("deletionTimestamp"):
        return _disrupted(pod)  # else deleted on purpose (elastic test, cleanup): not a failure of its own
    for cs in container_statuses(pod):
        reason = _container_failure(pod, cs, now, grace, held_for)
        if reason is not None:
            return reason
    return _phase_failure(pod) or _unschedulable(pod, now, grace, held_for)
