"""Named conditions for wait_for: jobs, MPIJobs, TrainJobs and JobSets done, failed or suspended, a
Warning event of an object, pods ready, succeeded, failed or ended, an MPIJob's worker lost, nodes
NotReady or advertising GPUs, an object deleted, a line in a pod's log, or a line after another in it.

A condition that judges many objects (pods, nodes) keeps its answer up to date from the objects
changed since it last looked (a ChangeCursor) and caches each object's verdict by
resourceVersion: a pod event costs O(1), not O(pods) (bench/harness_costs.py cpu).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from harness.cluster.pods import node_of, pod_failure_reason, pod_role, true_condition, unschedulable_message
from harness.cluster.resources import (
    CRD,
    DAEMONSET,
    DEPLOYMENT,
    ELASTICJOB,
    EVENT,
    JOB,
    JOBSET,
    MPIJOB,
    NODE,
    POD,
    TRAINJOB,
    Obj,
    Resource,
)
from harness.cluster.wait import Condition
from harness.cluster.watch import ChangeCursor, ClusterState, FollowedLog, Key, Watched
from harness.config.topology import GPU_RESOURCE, NodeInfo
from harness.config.values import format_duration
from harness.errors import JobFailed


def _reached(resource: Resource, namespace: str, name: str, condition_type: str, verb: str) -> Condition:
    """The object `name` of `resource` has `condition_type`=True; described as "<kind> <name> <verb>"."""
    label = resource.kind.lower()
    watches = (Watched(resource, namespace, field_selector=f"metadata.name={name}"),)

    def check(state: ClusterState, _now: float) -> str | None:
        cond = true_condition(state.get(resource.kind, namespace, name), condition_type)
        if cond is None:
            return None
        detail = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
        return f"{label} {name} {verb}" + (f": {detail}" if detail and condition_type == "Failed" else "")

    awaited = {"succeeded": "succeed", "failed": "fail"}.get(verb, f"be {verb}")
    return Condition(f"{label} {name} to {awaited}", watches, check)


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


def trainjob_succeeded(namespace: str, name: str) -> Condition:
    """A TrainJob (trainer.kubeflow.org/v1alpha1) is Complete."""
    return _reached(TRAINJOB, namespace, name, "Complete", "succeeded")


def trainjob_failed(namespace: str, name: str) -> Condition:
    """A TrainJob is Failed: its JobSet failed (reason and message are the JobSet's), or Trainer
    does not support its runtime (TrainingRuntimeNotSupported)."""
    return _reached(TRAINJOB, namespace, name, "Failed", "failed")


def _elasticjob_reached(namespace: str, name: str, condition_type: str, verb: str) -> Condition:
    """A DLRover ElasticJob has `condition_type`=True. Its operator keeps the conditions one level
    down, in status.status.conditions (status.phase beside them), not where _reached reads them."""
    watches = (Watched(ELASTICJOB, namespace, field_selector=f"metadata.name={name}"),)

    def check(state: ClusterState, _now: float) -> str | None:
        job = state.get(ELASTICJOB.kind, namespace, name) or {}
        cond = true_condition({"status": (job.get("status") or {}).get("status") or {}}, condition_type)
        if cond is None:
            return None
        detail = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
        return f"elasticjob {name} {verb}" + (f": {detail}" if detail and condition_type == "Failed" else "")

    return Condition(f"elasticjob {name} to {verb.removesuffix('ed')}", watches, check)


def elasticjob_succeeded(namespace: str, name: str) -> Condition:
    """A DLRover ElasticJob is Succeeded: its operator's word once the job's master pod succeeded
    (the master exits 0 when every worker finished)."""
    return _elasticjob_reached(namespace, name, "Succeeded", "succeeded")


def elasticjob_failed(namespace: str, name: str) -> Condition:
    """A DLRover ElasticJob is Failed: its master pod failed (a worker failed past its relaunches)."""
    return _elasticjob_reached(namespace, name, "Failed", "failed")


def jobset_failed(namespace: str, name: str) -> Condition:
    """A JobSet is Failed (FailedJobs, ReachedMaxRestarts, FailJobSetFailurePolicyAction ...)."""
    return _reached(JOBSET, namespace, name, "Failed", "failed")


def suspended(resource: Resource, namespace: str, name: str) -> Condition:
    """The object is Suspended (status True: a TrainJob's reason `Suspended`, a JobSet's
    `SuspendedJobs`): it will not run until someone resumes it, so waiting is pointless."""
    label = resource.kind.lower()

    def check(state: ClusterState, _now: float) -> str | None:
        cond = true_condition(state.get(resource.kind, namespace, name), "Suspended")
        if cond is None:
            return None
        detail = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
        return (f"{label} {name} is suspended" + (f" ({detail})" if detail else "")
                + ": nothing runs until it is resumed")

    return Condition(f"{label} {name} to be suspended",
                     (Watched(resource, namespace, field_selector=f"metadata.name={name}"),), check)


def warning_event(namespace: str, kind: str, name: str, reasons: Iterable[str],
                  message: re.Pattern[str] | None = None) -> Condition:
    """A Warning event of the object with one of `reasons` (and, if given, a message matching
    `message`): a controller saying it cannot make what the object asks for."""
    wanted = frozenset(reasons)
    watches = (Watched(EVENT, namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"),)

    def check(state: ClusterState, _now: float) -> str | None:
        for event in state.of_kind("Event"):
            involved = event.get("involvedObject", {})
            if (event.get("type") == "Warning" and event.get("reason") in wanted and involved.get("kind") == kind
                    and involved.get("name") == name and (message is None or message.search(event.get("message", "")))):
                return f"{kind} {name}: {event['reason']}: {event.get('message', '')}"
        return None

    return Condition(f"a Warning event ({', '.join(sorted(wanted))}) of {kind} {name}", watches, check)


def deployment_available(namespace: str, name: str) -> Condition:
    """A Deployment is Available (its minimum of replicas Ready)."""
    return _reached(DEPLOYMENT, namespace, name, "Available", "available")


def crd_established(name: str) -> Condition:
    """A CustomResourceDefinition is Established: the API server serves its kind."""
    return _reached(CRD, "", name, "Established", "established")


def pods_ready_on_nodes(namespace: str, label_selector: str, node_names: Iterable[str]) -> Condition:
    """A Ready pod of the selection on every one of the nodes: a DaemonSet rolled out there."""
    wanted = sorted(set(node_names))

    def check(state: ClusterState, _now: float) -> str | None:
        ready = {node_of(pod) for pod in state.of_kind("Pod")
                 if pod["metadata"].get("namespace") == namespace and true_condition(pod, "Ready") is not None}
        return f"a Ready pod on each of {', '.join(wanted)}" if ready.issuperset(wanted) else None

    return Condition(f"a Ready pod ({label_selector}) on each of {', '.join(wanted)}",
                     (Watched(POD, namespace, label_selector),), check)


# What the DaemonSet controller tolerates on its own for every DaemonSet pod (kube-controller-manager's
# daemon.util.AddOrUpdateDaemonPodTolerations): these taints never keep a DaemonSet off a node.
DAEMONSET_IMPLIED_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """Whether a pod with these tolerations may run on a node with this taint (the scheduler's rule:
    a PreferNoSchedule taint never keeps a pod off)."""
    if taint.get("effect") == "PreferNoSchedule":
        return True
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("key") and toleration["key"] != taint.get("key"):
            continue
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            continue
        if toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def taint_text(taint: Obj) -> str:
    """A taint as `kubectl taint` spells it: key[=value]:Effect."""
    value = taint.get("value")
    return f"{taint.get('key')}{f'={value}' if value else ''}:{taint.get('effect')}"


def daemonset_short(namespace: str, name: str, node_names: Iterable[str]) -> Condition:
    """The DaemonSet, once its controller has judged it, wants fewer pods than there are selected
    nodes: some node will never get one (an untolerated taint, a node selector that misses it, a
    node gone). Said at once, naming each such node and why, not after JOB_TIMEOUT."""
    wanted = sorted(set(node_names))

    def why_not(node: Obj | None, node_name: str, pod_spec: Obj) -> str | None:
        if node is None:
            return f"{node_name}: no such node"
        tolerations = [*(pod_spec.get("tolerations") or []), *DAEMONSET_IMPLIED_TOLERATIONS]
        untolerated = [taint_text(t) for t in node.get("spec", {}).get("taints") or [] if not tolerates(tolerations, t)]
        if untolerated:
            return f"{node_name}: taint {', '.join(untolerated)} not tolerated"
        labels = node["metadata"].get("labels") or {}
        missed = {k: v for k, v in (pod_spec.get("nodeSelector") or {}).items() if labels.get(k) != v}
        if missed:
            return f"{node_name}: node selector {', '.join(f'{k}={v}' for k, v in missed.items())} does not match"
        return None

    def check(state: ClusterState, _now: float) -> str | None:
        daemonset = state.get("DaemonSet", namespace, name)
        if daemonset is None or not state.listed("Node"):
            return None
        status = daemonset.get("status") or {}
        if status.get("observedGeneration", 0) < daemonset["metadata"].get("generation", 1):
            return None  # the controller has not judged this version yet
        desired = status.get("desiredNumberScheduled", 0)
        if desired >= len(wanted):
            return None
        pod_spec = daemonset["spec"]["template"]["spec"]
        reasons = [r for n in wanted if (r := why_not(state.get("Node", "", n), n, pod_spec))]
        return (f"daemonset {name} places pods on {desired} of the {len(wanted)} selected nodes; "
                + ("; ".join(reasons) or "no taint or node selector of theirs explains it"))

    return Condition(f"daemonset {name} to want fewer pods than the {len(wanted)} selected nodes",
                     (Watched(DAEMONSET, namespace, field_selector=f"metadata.name={name}"), Watched(NODE)), check)


def deleted(resource: Resource, name: str, namespace: str | None = None) -> Condition:
    """The object is gone (never there counts too, once it has been listed)."""
    watches = (Watched(resource, namespace, field_selector=f"metadata.name={name}"),)

    def check(state: ClusterState, _now: float) -> str | None:
        gone = state.listed(resource.kind) and state.get(resource.kind, namespace or "", name) is None
        return f"{resource.kind.lower()} {name} deleted" if gone else None

    return Condition(f"{resource.kind.lower()} {name} to be deleted", watches, check)


def log_line_matches(namespace: str, pod: str, pattern: re.Pattern[str], container: str | None = None) -> Condition:
    """A line of the pod's log matches `pattern` (the line is the description); JobFailed if the
    log ends without one. For "mid-training" moments only the workload's output shows."""
    followed = FollowedLog(namespace, pod, pattern, container)

    def check(state: ClusterState, _now: float) -> str | None:
        lines = state.log_lines(followed)
        if lines:
            return lines[0]
        if state.log_ended(followed):
            raise JobFailed(f"the log of {pod} ended without a line matching {pattern.pattern!r}", pod)
        return None

    return Condition(f"a line matching {pattern.pattern!r} in the log of {pod}", (followed,), check)


def log_line_after(namespace: str, pod: str, first: re.Pattern[str], then: re.Pattern[str],
                   container: str | None = None,
                   first_accepted: Callable[[re.Match[str]], bool] | None = None) -> Condition:
    """A line matching `then` after one matching `first` in the pod's log (the `then` line is the
    description): e.g. the first training step after "resumed from step N"; JobFailed if the log
    ends without one. `first_accepted` narrows which `first` lines count (a resume from a step at
    least N: not an earlier restart's, the log being read from its start)."""
    followed = FollowedLog(namespace, pod, re.compile(f"(?:{first.pattern})|(?:{then.pattern})"), container)

    def check(state: ClusterState, _now: float) -> str | None:
        seen_first = False
        for line in state.log_lines(followed):
            if seen_first and then.search(line):
                return line
            match = first.search(line)
            seen_first = seen_first or bool(match and (first_accepted is None or first_accepted(match)))
        if state.log_ended(followed):
            raise JobFailed(f"the log of {pod} ended without a line matching {then.pattern!r} after one matching "
                            f"{first.pattern!r}", pod)
        return None

    return Condition(f"a line matching {then.pattern!r} after {first.pattern!r} in the log of {pod}", (followed,),
                     check)


class _MatchingPods:
    """How many watched pods satisfy a predicate, kept up to date from the pods that changed."""

    def __init__(self, predicate: Callable[[Obj], bool]) -> None:
        self.predicate = predicate
        self.cursor = ChangeCursor("Pod")
        self.matching: set[Key] = set()

    def count(self, state: ClusterState) -> int:
        changed, fresh = self.cursor.changed(state)
        if fresh:
            self.matching.clear()
        for key in changed:
            pod = state.get("Pod", *key)
            if pod is not None and self.predicate(pod):
                self.matching.add(key)
            else:
                self.matching.discard(key)
        return len(self.matching)


def selected_by(label_selector: str) -> Callable[[Obj], bool]:
    """Whether a pod has every `key=value` of an equality-based label selector. A wait's sources
    share one state, so a count must say itself which pods it means: the job's pods are there with
    the workers a narrower selector picks (a DLRover master beside its workers)."""
    terms = [term.split("=", 1) for term in label_selector.split(",") if term]
    if any(len(term) != 2 or term[0].endswith("!") for term in terms):
        raise ValueError(f"only key=value terms are supported: {label_selector!r}")

    def selected(pod: Obj) -> bool:
        labels = pod.get("metadata", {}).get("labels") or {}
        return all(labels.get(key) == value for key, value in terms)

    return selected


def _pods_counted(namespace: str, label_selector: str, count: int, predicate: Callable[[Obj], bool],
                  awaited: str, seen_as: str) -> Condition:
    selected = selected_by(label_selector)
    matching = _MatchingPods(lambda pod: pod["metadata"].get("namespace") == namespace and selected(pod)
                             and predicate(pod))

    def check(state: ClusterState, _now: float) -> str | None:
        seen = matching.count(state)
        return f"{seen} pods {seen_as}" if seen >= count else None

    return Condition(f"{count} pods ({label_selector}) to {awaited}", (Watched(POD, namespace, label_selector),),
                     check)


def pod_found(namespace: str, label_selector: str, predicate: Callable[[Obj], bool], what: str) -> Condition:
    """A watched pod of the namespace satisfies `predicate` (its name is the description). The
    predicate sees every pod the wait watches (all sources share one state): it must say itself
    which pods it means, not rely on `label_selector`."""

    def check(state: ClusterState, _now: float) -> str | None:
        return next((pod["metadata"]["name"] for pod in state.of_kind("Pod")
                     if pod["metadata"].get("namespace") == namespace and predicate(pod)), None)

    return Condition(what, (Watched(POD, namespace, label_selector),), check)


def pods_ready(namespace: str, label_selector: str, count: int) -> Condition:
    """At least `count` of the selected pods are Ready."""
    return _pods_counted(namespace, label_selector, count, lambda pod: true_condition(pod, "Ready") is not None,
                         "be ready", "ready")


def pods_succeeded(namespace: str, label_selector: str, count: int) -> Condition:
    """At least `count` of the selected pods are in phase Succeeded."""
    return _pods_counted(namespace, label_selector, count,
                         lambda pod: pod.get("status", {}).get("phase") == "Succeeded", "succeed", "succeeded")


class _FailingPods:
    """The failing pods, kept up to date from the pods changed since the last look; pods under a
    grace period are judged again on every look. The first failure in (namespace, name) order is
    the answer, as a full scan would give."""

    def __init__(self, grace: float, retried: Callable[[Obj], bool]) -> None:
        self.grace = grace
        self.retried = retried
        self.cursor = ChangeCursor("Pod")
        self.failing: dict[Key, tuple[str, str]] = {}  # key -> (pod name, reason)
        self.timed: set[Key] = set()  # pods whose verdict depends on the clock
        # uid -> (resourceVersion, reason): a pod's verdict changes only with a new version of
        # it unless a grace period is running, so a re-list does not judge every pod again.
        self.verdicts: dict[str, tuple[str, str | None]] = {}
        # The pods seen (not deleted), and those the scheduler cannot place with its message:
        # partial scheduling is reported as how many are pending and why.
        self.alive: set[Key] = set()
        self.unschedulable: dict[Key, str] = {}

    def first(self, state: ClusterState, now: float) -> tuple[Key, str, str] | None:
        """(key, pod name, reason) of the first failing pod, or None."""
        changed, fresh = self.cursor.changed(state)
        if fresh:
            for kept in (self.failing, self.timed, self.alive, self.unschedulable):
                kept.clear()
        for key in {*changed, *self.timed}:
            self.timed.discard(key)
            self.failing.pop(key, None)
            pod = state.get("Pod", *key)
            self._note_scheduling(key, pod)
            if pod is not None:
                self._judge(key, pod, state, now)
        if not self.failing:
            return None
        key = min(self.failing)
        return (key, *self.failing[key])

    def _note_scheduling(self, key: Key, pod: Obj | None) -> None:
        message = None if pod is None else unschedulable_message(pod)
        if pod is None:
            self.alive.discard(key)
        else:
            self.alive.add(key)
        if message is None:
            self.unschedulable.pop(key, None)
        else:
            self.unschedulable[key] = message

    def describe(self, key: Key, reason: str) -> str:
        """The failure; for an unschedulable pod, with how many pods are pending and why."""
        if key not in self.unschedulable:
            return reason
        others = Counter(message for other, message in self.unschedulable.items()
                         if message != self.unschedulable[key])
        also = "; ".join(f"{count} pod(s): {message}" for message, count in others.most_common(3))
        return (f"{len(self.unschedulable)} of {len(self.alive)} pods Pending, unschedulable past POD_FAILURE_GRACE "
                f"({format_duration(self.grace)}): {reason}" + (f"; other reasons: {also}" if also else ""))

    def _judge(self, key: Key, pod: Obj, state: ClusterState, now: float) -> None:
        meta = pod["metadata"]
        uid, version = meta.get("uid") or meta["name"], meta.get("resourceVersion")
        cached = self.verdicts.get(uid)
        if version is not None and cached is not None and cached[0] == version:
            reason = cached[1]
        elif pod.get("status", {}).get("phase") == "Failed" and self.retried(pod):
            reason = None  # its owner runs it again (the MPI launcher's Job): judged by the owner's failure
        else:
            time_checks = state.time_checks
            reason = pod_failure_reason(pod, now, self.grace, state.held_for)
            if state.time_checks != time_checks:
                self.timed.add(key)
            elif version is not None:
                self.verdicts[uid] = (version, reason)
        if reason is not None:
            self.failing[key] = meta["name"], reason


def _never(_pod: Obj) -> bool:
    return False


def any_pod_failed(namespace: str, label_selector: str, grace: float,
                   retried: Callable[[Obj], bool] = _never) -> Condition:
    """A pod Failed, OOMKilled, crash-looping, or unschedulable / not pulling past `grace`; a
    Failed pod for which `retried` is true is a run its owner retries, not a failure."""
    failing = _FailingPods(grace, retried)

    def check(state: ClusterState, now: float) -> str | None:
        found = failing.first(state, now)
        return failing.describe(found[0], found[2]) if found else None

    def blame(state: ClusterState, now: float) -> str | None:
        found = failing.first(state, now)
        return found[1] if found else None

    return Condition(f"a pod ({label_selector}) to fail", (Watched(POD, namespace, label_selector),), check, blame)


class _LostWorkers:
    """An MPIJob's worker pods seen so far, and the first of them deleted or gone."""

    def __init__(self) -> None:
        self.cursor = ChangeCursor("Pod")
        self.seen: dict[Key, Obj] = {}
        self.lost: dict[Key, Obj] = {}  # the pod as last seen

    def first(self, state: ClusterState) -> Obj | None:
        changed, _ = self.cursor.changed(state)
        for key in changed:
            pod = state.get("Pod", *key)
            if pod is None:
                if key in self.seen:
                    self.lost.setdefault(key, self.seen[key])
            elif pod_role(pod) == "worker":
                if pod["metadata"].get("deletionTimestamp"):
                    self.lost.setdefault(key, pod)
                self.seen[key] = pod
        return self.lost[min(self.lost)] if self.lost else None


def mpi_worker_lost(namespace: str, label_selector: str) -> Condition:
    """A worker pod of an MPIJob was deleted (or vanished) while the job ran: mpirun cannot go on
    without its ranks, and mpi-operator's new worker does not bring them back."""
    lost = _LostWorkers()

    def check(state: ClusterState, _now: float) -> str | None:
        pod = lost.first(state)
        return None if pod is None else f"worker pod {pod['metadata']['name']} on node {node_of(pod)} " \
                                        "was deleted while the job ran"

    def blame(state: ClusterState, _now: float) -> str | None:
        pod = lost.first(state)
        return None if pod is None else pod["metadata"]["name"]

    return Condition(f"a worker pod ({label_selector}) to be deleted", (Watched(POD, namespace, label_selector),),
                     check, blame)


def pods_ended(namespace: str, label_selector: str, names: Iterable[str]) -> Condition:
    """Each named pod is Succeeded, Failed or gone (its processes have exited)."""
    awaited = sorted(set(names))

    def check(state: ClusterState, _now: float) -> str | None:
        if not state.listed("Pod"):
            return None
        running = [name for name in awaited
                   if (pod := state.get("Pod", namespace, name)) is not None
                   and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        return None if running else f"pods {', '.join(awaited) or '(none)'} ended"

    return Condition(f"pods {', '.join(awaited)} to end", (Watched(POD, namespace, label_selector),), check)


class _NodesNotReady:
    """The first of some nodes that is NotReady or gone: all of them judged once, then only the
    nodes changed since the last look (a 1,000-node job's heartbeats re-judged every node on each
    one); each node's readiness cached by resourceVersion."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.wanted = set(names)
        self.cursor = ChangeCursor("Node")
        self.failing: dict[str, str] = {}  # name -> reason, for the nodes NotReady or gone
        self.judged_all = False
        self.verdicts: dict[str, tuple[str, str | None]] = {}  # name -> (resourceVersion, reason)

    def first_failing(self, state: ClusterState) -> tuple[str, str] | None:
        """(name, reason) of the first node (by name) that is NotReady or gone."""
        changed, fresh = self.cursor.changed(state)
        if not state.count("Node"):
            return None  # not listed yet
        if fresh or not self.judged_all:
            self.failing = {name: reason for name in self.names if (reason := self._verdict(name, state))}
            self.judged_all = True
        else:
            for _, name in changed:
                if name in self.wanted:
                    reason = self._verdict(name, state)
                    if reason is None:
                        self.failing.pop(name, None)
                    else:
                        self.failing[name] = reason
        if not self.failing:
            return None
        name = min(self.failing)
        return name, self.failing[name]

    def _verdict(self, name: str, state: ClusterState) -> str | None:
        node = state.get("Node", "", name)
        if node is None:
            return f"node {name} was removed from the cluster"
        version = node["metadata"].get("resourceVersion")
        cached = self.verdicts.get(name)
        if version is not None and cached is not None and cached[0] == version:
            return cached[1]
        ready = next((c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"), None)
        reason = None
        if ready is None or ready.get("status") != "True":
            why = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
            reason = f"node {name} is NotReady: {why}"
        if version is not None:
            self.verdicts[name] = (version, reason)
        return reason


def _pods_on(state: ClusterState, namespace: str, node: str) -> list[Obj]:
    """The job's pods (of its namespace) placed on a node, not yet ended."""
    return [pod for pod in state.of_kind("Pod") if pod["metadata"].get("namespace") == namespace
            and node_of(pod) == node and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def node_not_ready(node_names: Iterable[str], namespace: str | None = None, label_selector: str = "") -> Condition:
    """One of the nodes the job runs on went NotReady (or vanished). With the job's namespace the
    failure names the pods it strands there and blames the first: a dead runtime or kubelet
    leaves them `Running` in the API, so no pod failure would ever name them (issue 34)."""
    names = sorted(set(node_names))
    nodes = _NodesNotReady(names)
    watches: tuple[Watched, ...] = (Watched(NODE),)
    if namespace is not None:
        watches += (Watched(POD, namespace, label_selector),)

    def stranded(state: ClusterState) -> tuple[str, list[str]] | None:
        failing = nodes.first_failing(state)
        if failing is None:
            return None
        node, reason = failing
        pods = [] if namespace is None else [p["metadata"]["name"] for p in _pods_on(state, namespace, node)]
        return reason, pods

    def check(state: ClusterState, _now: float) -> str | None:
        found = stranded(state)
        if found is None:
            return None
        reason, pods = found
        return f"{reason} (its pods: {', '.join(pods)})" if pods else reason

    def blame(state: ClusterState, _now: float) -> str | None:
        found = stranded(state)
        return found[1][0] if found and found[1] else None

    return Condition(f"nodes {', '.join(names)} to go NotReady", watches, check, blame)


class _NodesWithGpus:
    """The Ready nodes of a type that advertise enough GPUs: every node judged once, then only the
    nodes changed since the last look (while discovery waits on 1,000 new nodes, each of their
    updates re-judged all of them: 7 s of CPU in 50 s)."""

    def __init__(self, node_type: str, per_node: int) -> None:
        self.node_type, self.per_node = node_type, per_node
        self.cursor = ChangeCursor("Node")
        self.good: set[str] = set()

    def count(self, state: ClusterState) -> int:
        changed, fresh = self.cursor.changed(state)
        if fresh:
            self.good = {n["metadata"]["name"] for n in state.of_kind("Node") if self._good(n)}
        else:
            for _, name in changed:
                node = state.get("Node", "", name)
                if node is not None and self._good(node):
                    self.good.add(name)
                else:
                    self.good.discard(name)
        return len(self.good)

    def _good(self, node: Obj) -> bool:
        info = NodeInfo.from_node(node)
        return info.ready and info.instance_type == self.node_type and info.gpus >= self.per_node


def nodes_advertise_gpus(node_type: str, count: int, per_node: int) -> Condition:
    """At least `count` Ready nodes of `node_type` advertise `per_node` GPUs or more."""
    nodes = _NodesWithGpus(node_type, per_node)

    def check(state: ClusterState, _now: float) -> str | None:
        good = nodes.count(state)
        return f"{good} nodes advertise GPUs" if good >= count else None

    return Condition(f"{count} {node_type} nodes to advertise >= {per_node} {GPU_RESOURCE}", (Watched(NODE),), check)
