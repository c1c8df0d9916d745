"""Waiting: one function, `wait_for`, and named conditions over watched cluster state.

    wait_for(cluster, job_succeeded(ns, "bert-training"),
             fails_on=[job_failed(ns, "bert-training"), any_pod_failed(ns, selector, grace)],
             timeout=cfg.job_timeout, cancel=token)

Each watched resource is listed once, then watched (re-listed on 410 Gone, resumed after a
dropped connection), in a thread that feeds one queue; conditions are evaluated on every event,
so a verdict follows the cluster's change within milliseconds, with no polling of the API.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.cancel import CancelToken
from harness.cluster import JOB, MPIJOB, NODE, POD, Cluster, Obj, Resource, WatchExpired, is_transient
from harness.config import format_duration
from harness.errors import ClusterError, Interrupted, JobFailed, WaitTimeout

log = logging.getLogger(__name__)

# How often time-based conditions (grace periods) are re-checked when no event arrives.
TICK_SECONDS = 0.5


@dataclass(frozen=True)
class Watched:
    """A set of objects to keep in view: one resource in one namespace, optionally selected."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


@dataclass
class ClusterState:
    """The latest version of every watched object, plus when each condition was first seen."""

    # kind -> (namespace, name) -> object. Per kind, with the sorted names kept until one is
    # added or removed: conditions read of_kind on every event, and re-sorting every watched
    # object per event made a 256-pod job's wait cost O(pods^2) (bench/harness.py cpu).
    _by_kind: dict[str, dict[tuple[str, str], Obj]] = field(default_factory=dict)
    _order: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    # kind -> the keys of the objects changed, in order: a condition remembers how far it has
    # read and judges again only those (a pod event costs O(1), not O(pods)).
    _changed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    _first_seen: dict[str, float] = field(default_factory=dict)
    # How often held_for was consulted: a verdict reached without it depends only on the objects.
    time_checks: int = 0

    def update(self, kind: str, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        objects = self._by_kind.setdefault(kind, {})
        self._changed.setdefault(kind, []).append(key)
        if event_type == "DELETED":
            if objects.pop(key, None) is not None:
                self._order.pop(kind, None)
        else:
            if key not in objects:
                self._order.pop(kind, None)
            objects[key] = obj

    def replace_all(self, kind: str, items: list[Obj]) -> None:
        self._changed.setdefault(kind, []).extend(self._by_kind.get(kind, {}))  # gone, unless listed again
        self._by_kind[kind] = {}
        self._order.pop(kind, None)
        for item in items:
            self.update(kind, "ADDED", item)

    def of_kind(self, kind: str) -> list[Obj]:
        """The objects of a kind, by namespace and name."""
        objects = self._by_kind.get(kind)
        if not objects:
            return []
        order = self._order.get(kind)
        if order is None:
            order = self._order[kind] = sorted(objects)
        return [objects[key] for key in order]

    def generation(self, kind: str) -> int:
        """Changes seen to objects of a kind so far."""
        return len(self._changed.get(kind, ()))

    def changes_since(self, kind: str, generation: int) -> list[tuple[str, str]]:
        """(namespace, name) of the objects changed (or removed) after `generation`."""
        return self._changed.get(kind, [])[generation:]

    def of_kind_count(self, kind: str) -> int:
        return len(self._by_kind.get(kind) or {})

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._by_kind.get(kind, {}).get((namespace, name))

    def held_for(self, marker: str, now: float) -> float:
        """Seconds since `marker` (e.g. "pod uid unschedulable") was first observed."""
        self.time_checks += 1
        return now - self._first_seen.setdefault(marker, now)

    def summary(self) -> str:
        """One line per pod and job: what the last state seen was, for timeout messages."""
        lines = [f"job {obj['metadata']['name']}: {_conditions_text(obj)}"
                 for obj in self.of_kind("Job") + self.of_kind("MPIJob")]
        lines += [f"pod {pod['metadata']['name']}: {describe_pod(pod)}" for pod in self.of_kind("Pod")]
        return "\n".join(lines) or "no objects seen"


@dataclass(frozen=True)
class Condition:
    """A named predicate over the cluster state: `check` returns a description when it holds."""

    name: str
    watches: tuple[Watched, ...]
    check: Callable[[ClusterState, float], str | None]
    # For failure conditions: the pod to blame, so its log can be quoted.
    blame: Callable[[ClusterState, float], str | None] = lambda _s, _n: None


class _StreamThread(threading.Thread):
    """List + watch one Watched, feeding ("SYNC"|event type|"ERROR", kind, payload) to a queue."""

    def __init__(self, cluster: Cluster, watched: Watched, events: queue.Queue[tuple[str, str, object]],
                 stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"watch-{watched.resource.plural}")
        self.cluster, self.watched, self.events, self.stop = cluster, watched, events, stop
        self.stream = None

    def run(self) -> None:
        w, kind = self.watched, self.watched.resource.kind
        backoff = 0.2
        while not self.stop.is_set():
            try:
                listing = self.cluster.list(w.resource, w.namespace, w.label_selector, w.field_selector)
                self.events.put(("SYNC", kind, listing.get("items", [])))
                version = listing["metadata"]["resourceVersion"]
                while not self.stop.is_set():
                    self.stream = self.cluster.watch(w.resource, w.namespace, version,
                                                     w.label_selector, w.field_selector)
                    for event_type, obj in self.stream:
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event_type != "BOOKMARK":
                            self.events.put((event_type, kind, obj))
                    backoff = 0.2
            except WatchExpired:
                continue  # re-list from now
            except Exception as exc:
                if self.stop.is_set():
                    return
                if not is_transient(exc):
                    self.events.put(("ERROR", kind, exc))
                    return
                # A dropped connection (API server restart): re-list once it answers again.
                log.info("watch %s dropped (%s); resuming", w.resource.plural, exc)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


def wait_for(cluster: Cluster, condition: Condition, *, fails_on: Iterable[Condition] = (),
             timeout: float, cancel: CancelToken | None = None,
             on_event: Callable[[ClusterState], None] | None = None) -> str:
    """Wait until `condition` holds; return its description.

    Raises JobFailed when a `fails_on` condition holds first (with the pod to blame), WaitTimeout
    (message starting TIMEOUT, with the last state seen) after `timeout` seconds, Interrupted
    when `cancel` is set, ClusterError when the API refuses a watch.
    """
    failures = list(fails_on)
    watched = list(dict.fromkeys(w for c in (condition, *failures) for w in c.watches))
    events: queue.Queue[tuple[str, str, object]] = queue.Queue()
    stop = threading.Event()
    threads = [_StreamThread(cluster, w, events, stop) for w in watched]
    state = ClusterState()
    deadline = time.monotonic() + timeout
    cancel = cancel or CancelToken()
    for thread in threads:
        thread.start()
    try:
        while True:
            now = time.monotonic()
            if cancel.is_set():
                raise Interrupted(f"{cancel.reason} while waiting for {condition.name}; "
                                  f"last state:\n{state.summary()}")
            if now >= deadline:
                raise WaitTimeout(f"TIMEOUT: waited {format_duration(timeout)} for {condition.name}; "
                                  f"last state:\n{state.summary()}")
            try:
                _apply_event(state, events.get(timeout=min(TICK_SECONDS, deadline - now)), condition)
                # Drain what else arrived, so a burst of events is evaluated once.
                while not events.empty():
                    _apply_event(state, events.get_nowait(), condition)
            except queue.Empty:
                pass  # a tick: grace periods may have run out
            if on_event is not None:
                on_event(state)
            now = time.monotonic()
            met = condition.check(state, now)
            if met is not None:
                return met
            for failure in failures:
                reason = failure.check(state, now)
                if reason is not None:
                    raise JobFailed(reason, pod=failure.blame(state, now))
    finally:
        stop.set()
        for thread in threads:
            thread.close()


def _apply_event(state: ClusterState, event: tuple[str, str, object], condition: Condition) -> None:
    event_type, kind, payload = event
    if event_type == "ERROR":
        raise ClusterError(f"wait for {condition.name}: {payload}")
    if event_type == "SYNC":
        state.replace_all(kind, payload)  # type: ignore[arg-type]
    else:
        state.update(kind, event_type, payload)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Describing pods


def _conditions_text(obj: Obj) -> str:
    conditions = obj.get("status", {}).get("conditions") or []
    true = [c["type"] for c in conditions if c.get("status") == "True"]
    return ", ".join(true) or "no condition yet"


def node_of(pod: Obj) -> str:
    return pod.get("spec", {}).get("nodeName") or "<unscheduled>"


def container_statuses(pod: Obj) -> list[Obj]:
    status = pod.get("status", {})
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def describe_pod(pod: Obj) -> str:
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


# ---------------------------------------------------------------------------------------------
# Named conditions


def _has_condition(obj: Obj | None, *types: str) -> Obj | None:
    for cond in (obj or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") in types and cond.get("status") == "True":
            return cond
    return None


def _reached(resource: Resource, namespace: str, name: str, condition_type: str, verb: str) -> Condition:
    """The object `name` of `resource` has `condition_type`=True; described as "<kind> <name> <verb>"."""
    label = resource.kind.lower()
    watches = (Watched(resource, namespace, field_selector=f"metadata.name={name}"),)

    def check(state: ClusterState, _now: float) -> str | None:
        cond = _has_condition(state.get(resource.kind, namespace, name), condition_type)
        if cond is None:
            return None
        detail = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
        return f"{label} {name} {verb}" + (f": {detail}" if detail and condition_type == "Failed" else "")

    return Condition(f"{label} {name} to {'succeed' if verb == 'succeeded' else 'fail'}", watches, check)


def job_succeeded(namespace: str, name: str) -> Condition:
    """A batch/v1 Job is Complete."""
    return _reached(JOB, namespace, name, "Complete", "succeeded")


def job_failed(namespace: str, name: str) -> Condition:
    return _reached(JOB, namespace, name, "Failed", "failed")


def mpijob_succeeded(namespace: str, name: str) -> Condition:
    """An MPIJob (kubeflow.org/v2beta1) is Succeeded."""
    return _reached(MPIJOB, namespace, name, "Succeeded", "succeeded")


def mpijob_failed(namespace: str, name: str) -> Condition:
    return _reached(MPIJOB, namespace, name, "Failed", "failed")


def pods_ready(namespace: str, label_selector: str, count: int) -> Condition:
    watches = (Watched(POD, namespace, label_selector),)

    def check(state: ClusterState, _now: float) -> str | None:
        ready = [p for p in state.of_kind("Pod") if _has_condition(p, "Ready")]
        return f"{len(ready)} pods ready" if len(ready) >= count else None

    return Condition(f"{count} pods ({label_selector}) to be ready", watches, check)


# Waiting reasons that end a pod's chances at once, and those given a grace period (image pulls
# can be slow or transiently rate-limited).
FATAL_WAITING = frozenset({"CrashLoopBackOff", "CreateContainerConfigError", "InvalidImageName",
                           "CreateContainerError", "RunContainerError"})
GRACED_WAITING = frozenset({"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull"})


def pod_failure_reason(pod: Obj, state: ClusterState, now: float, grace: float) -> str | None:
    """Why this pod has failed (or will never run), or None while it still may succeed."""
    meta, status = pod["metadata"], pod.get("status", {})
    if meta.get("deletionTimestamp"):
        return None  # deleted on purpose (elastic test, cleanup): not a failure of its own
    where = f"pod {meta['name']} on node {node_of(pod)}"
    for cs in container_statuses(pod):
        terminated = cs.get("state", {}).get("terminated") or cs.get("lastState", {}).get("terminated")
        if terminated and terminated.get("reason") == "OOMKilled":
            return (f"pod {meta['name']} OOMKilled on node {node_of(pod)} "
                    f"(container {cs['name']}, exit code {terminated.get('exitCode')})")
        waiting = cs.get("state", {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in FATAL_WAITING:
            return f"{where}: container {cs['name']} {reason}: {waiting.get('message', '')}".rstrip(": ")
        if reason in GRACED_WAITING:
            held = state.held_for(f"{meta['uid']}/{cs['name']}/image", now)
            if held >= grace:
                return (f"{where}: container {cs['name']} {reason} for {held:.0f}s: "
                        f"{waiting.get('message', '')}").rstrip(": ")
    if status.get("phase") == "Failed":
        for cs in container_statuses(pod):
            terminated = cs.get("state", {}).get("terminated")
            if terminated and terminated.get("exitCode", 0) != 0:
                return (f"{where} failed: container {cs['name']} exited with code "
                        f"{terminated.get('exitCode')} ({terminated.get('reason', 'Error')})")
        return f"{where} failed: {status.get('reason', '')} {status.get('message', '')}".strip()
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        held = state.held_for(f"{meta['uid']}/unschedulable", now)
        if held >= grace:
            return (f"pod {meta['name']} unschedulable for {held:.0f}s: "
                    f"{scheduled.get('message', '')}").rstrip(": ")
    return None


def any_pod_failed(namespace: str, label_selector: str, grace: float) -> Condition:
    """A pod Failed, OOMKilled, crash-looping, or unschedulable / not pulling past `grace`."""
    watches = (Watched(POD, namespace, label_selector),)

    # A pod's verdict changes only with a new version of it, unless a grace period is running
    # (held_for consulted): cached by uid and resourceVersion, so a re-list (after a dropped
    # watch) does not judge every pod again. Judging every pod on every event was most of a
    # 256-pod job's harness CPU (bench/harness.py cpu).
    verdicts: dict[str, tuple[str, str | None]] = {}

    def verdict(pod: Obj, state: ClusterState, now: float) -> str | None:
        meta = pod["metadata"]
        uid, version = meta.get("uid") or meta["name"], meta.get("resourceVersion")
        cached = verdicts.get(uid)
        if version is not None and cached is not None and cached[0] == version:
            return cached[1]
        time_checks = state.time_checks
        reason = pod_failure_reason(pod, state, now, grace)
        if version is not None and state.time_checks == time_checks:
            verdicts[uid] = (version, reason)
        return reason

    # The failing pods, kept up to date from the pods changed since the last check; pods under a
    # grace period are judged again on every check. The first failure in (namespace, name) order
    # is the answer, as a full scan would give.
    tracked: list[Any] = [None, 0]  # the state read, and its pod generation read up to
    failing: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (pod name, reason)
    timed: set[tuple[str, str]] = set()

    def first_failure(state: ClusterState, now: float) -> tuple[str, str] | None:
        if tracked[0] is not state:
            tracked[:] = [state, 0]
            failing.clear()
            timed.clear()
        changed = state.changes_since("Pod", tracked[1])
        tracked[1] += len(changed)
        for key in {*changed, *timed}:
            timed.discard(key)
            failing.pop(key, None)
            pod = state.get("Pod", *key)
            if pod is None:
                continue
            time_checks = state.time_checks
            reason = verdict(pod, state, now)
            if state.time_checks != time_checks:
                timed.add(key)
            if reason is not None:
                failing[key] = pod["metadata"]["name"], reason
        return failing[min(failing)] if failing else None

    def check(state: ClusterState, now: float) -> str | None:
        found = first_failure(state, now)
        return found[1] if found else None

    def blame(state: ClusterState, now: float) -> str | None:
        found = first_failure(state, now)
        return found[0] if found else None

    return Condition(f"a pod ({label_selector}) to fail", watches, check, blame)


def node_not_ready(node_names: Iterable[str]) -> Condition:
    """One of the nodes the job runs on went NotReady (or vanished)."""
    names = sorted(set(node_names))
    watches = (Watched(NODE),)

    # name -> (resourceVersion, verdict): a node's readiness is re-read only when it changed, not
    # for every node on every event (256 nodes: O(nodes x events) otherwise).
    verdicts: dict[str, tuple[str, str | None]] = {}

    def node_verdict(name: str, node: Obj) -> str | None:
        version = node["metadata"].get("resourceVersion")
        cached = verdicts.get(name)
        if version is not None and cached is not None and cached[0] == version:
            return cached[1]
        ready = next((c for c in node.get("status", {}).get("conditions") or []
                      if c.get("type") == "Ready"), None)
        reason = None
        if ready is None or ready.get("status") != "True":
            why = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
            reason = f"node {name} is NotReady: {why}"
        if version is not None:
            verdicts[name] = (version, reason)
        return reason

    last: list[Any] = [None, -1, None]  # state, its node generation, the answer

    def check(state: ClusterState, _now: float) -> str | None:
        if not state.of_kind_count("Node"):
            return None  # not listed yet
        generation = state.generation("Node")
        if last[0] is state and last[1] == generation:
            return last[2]
        found = None
        for name in names:
            node = state.get("Node", "", name)
            found = f"node {name} was removed from the cluster" if node is None else node_verdict(name, node)
            if found is not None:
                break
        last[:] = [state, generation, found]
        return found

    return Condition(f"nodes {', '.join(names)} to go NotReady", watches, check)
