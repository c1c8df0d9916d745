"""Named conditions on canned pod and job objects (the real waits run in tests/integration)."""

from __future__ import annotations

import re

import pytest

from harness.cluster.conditions import (
    any_pod_failed,
    deleted,
    job_failed,
    job_succeeded,
    log_line_matches,
    node_not_ready,
    nodes_advertise_gpus,
    pods_ready,
    pods_succeeded,
)
from harness.cluster.resources import NAMESPACE
from harness.cluster.watch import LOG_END, LOG_LINE, ClusterState
from harness.errors import JobFailed


def pod(name="w-0", phase="Running", node="n1", waiting=None, terminated=None, last_terminated=None,
        conditions=None, deleting=False, restarts=0):
    state = {}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": f"{waiting} details"}
    if terminated:
        state["terminated"] = terminated
    cs = {"name": "worker", "state": state, "restartCount": restarts}
    if last_terminated:
        cs["lastState"] = {"terminated": last_terminated}
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"x": "y"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": phase, "containerStatuses": [cs], "conditions": conditions or []}}


def state_of(*objs, kind="Pod"):
    state = ClusterState()
    state.replace_all(kind, list(objs))
    return state


def check(p, now=0.0, grace=60.0, state=None):
    cond = any_pod_failed("ns", "x=y", grace)
    st = state or state_of(p)
    return cond.check(st, now), cond.blame(st, now)


def test_running_pod_is_fine():
    assert check(pod()) == (None, None)


def test_failed_pod_names_pod_node_and_exit_code():
    reason, blame = check(pod(phase="Failed", terminated={"exitCode": 3, "reason": "Error"}))
    assert reason == "pod w-0 on node n1 failed: container worker exited with code 3 (Error)"
    assert blame == "w-0"


def test_oomkilled_is_immediate_even_while_restarting():
    reason, _ = check(pod(waiting="CrashLoopBackOff", last_terminated={"reason": "OOMKilled", "exitCode": 137}))
    assert reason.startswith("pod w-0 OOMKilled on node n1")


def test_crashloop_is_immediate():
    reason, _ = check(pod(waiting="CrashLoopBackOff", restarts=3))
    assert "CrashLoopBackOff" in reason


def test_an_image_the_kubelet_may_never_pull_fails_at_once_naming_it():
    """imagePullPolicy Never and the image not on the node: no grace can help (a real node of the local
    cluster without `hack/local-cluster load-image`, or a node whose pre-pull failed)."""
    p = pod(waiting="ErrImageNeverPull", phase="Pending")
    reason, blame = check(p, now=100.0, state=state_of(p))
    assert reason is not None and "ErrImageNeverPull" in reason and blame == "w-0"


def test_image_pull_waits_for_grace():
    p = pod(waiting="ImagePullBackOff", phase="Pending")
    state = state_of(p)
    assert check(p, now=100.0, state=state)[0] is None  # first seen now
    reason, _ = check(p, now=161.0, state=state)
    assert "ImagePullBackOff for 61s" in reason


def test_unschedulable_after_grace_quotes_scheduler():
    sched = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]
    p = pod(phase="Pending", node=None, conditions=sched)
    state = state_of(p)
    assert check(p, now=0.0, state=state)[0] is None
    reason, _ = check(p, now=60.0, state=state)
    assert reason.startswith("1 of 1 pods Pending, unschedulable past POD_FAILURE_GRACE")
    assert reason.endswith("pod w-0 unschedulable for 60s: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")


def test_deleted_pod_is_not_a_failure():
    assert check(pod(phase="Failed", terminated={"exitCode": 137}, deleting=True)) == (None, None)



def test_an_evicted_pod_is_a_failure_naming_pod_node_and_cause():
    """A drain's eviction sets DisruptionTarget before deleting the pod (issue 34): unlike a pod
    deleted on purpose, it fails the job naming the eviction."""
    evicted = pod(deleting=True, conditions=[{"type": "DisruptionTarget", "status": "True",
                                              "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}])
    reason, blame = check(evicted)
    assert reason == "pod w-0 on node n1 was taken away while it ran: EvictionByEvictionAPI: Eviction API: evicting"
    assert blame == "w-0"

def test_job_conditions():
    job = {"metadata": {"name": "bert", "namespace": "ns"},
           "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}]}}
    state = state_of(job, kind="Job")
    assert job_succeeded("ns", "bert").check(state, 0) is None
    assert job_failed("ns", "bert").check(state, 0) == (
        "job bert failed: BackoffLimitExceeded: Job has reached the specified backoff limit")
    job["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert job_succeeded("ns", "bert").check(state_of(job, kind="Job"), 0) == "job bert succeeded"


def test_node_not_ready_names_node():
    node = {"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "message": "Kubelet stopped posting node status."}]}}
    cond = node_not_ready(["n1"])
    assert cond.check(state_of(node, kind="Node"), 0) == "node n1 is NotReady: Kubelet stopped posting node status."
    node["status"]["conditions"][0]["status"] = "True"
    assert cond.check(state_of(node, kind="Node"), 0) is None



def test_node_not_ready_names_the_pods_it_strands_and_blames_the_first():
    """Issue 34: containerd or the kubelet of a real node gone leaves its pods Running in the API;
    the failure names them (and the pod the report quotes), not only the node."""
    node = {"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "message": "container runtime is down"}]}}
    state = state_of(node, kind="Node")
    state.replace_all("Pod", [pod("w-1"), pod("w-0", node="n2"), pod("w-2", phase="Succeeded"),
                              {**pod("other"), "metadata": {"name": "other", "namespace": "elsewhere"}}])
    cond = node_not_ready(["n1", "n2"], "ns", "x=y")
    assert cond.check(state, 0) == "node n1 is NotReady: container runtime is down (its pods: w-1)"
    assert cond.blame(state, 0) == "w-1"
    assert node_not_ready(["n1"]).blame(state, 0) is None

def test_pods_counted_follow_each_pods_changes():
    state = state_of(pod("w-0", phase="Succeeded"), pod("w-1"))
    done, ready = pods_succeeded("ns", "x=y", 2), pods_ready("ns", "x=y", 1)
    assert done.check(state, 0) is None
    state.update("Pod", "MODIFIED", pod("w-1", phase="Succeeded"))
    assert done.check(state, 0) == "2 pods succeeded"
    state.update("Pod", "DELETED", pod("w-0"))
    assert done.check(state, 0) is None
    assert ready.check(state, 0) is None
    state.update("Pod", "MODIFIED", pod("w-1", conditions=[{"type": "Ready", "status": "True"}]))
    assert ready.check(state, 0) == "1 pods ready"


def test_pods_counted_are_the_selectors_only_though_the_state_holds_more():
    # A wait's sources share one state: a DLRover master (the job's label, not the workers') is in it.
    master = pod("master", conditions=[{"type": "Ready", "status": "True"}])
    worker = pod("w-0", conditions=[{"type": "Ready", "status": "True"}])
    worker["metadata"]["labels"]["role"] = "worker"
    state = state_of(master, worker)
    assert pods_ready("ns", "x=y", 2).check(state, 0) == "2 pods ready"
    assert pods_ready("ns", "x=y,role=worker", 2).check(state, 0) is None
    assert pods_ready("ns", "x=y,role=worker", 1).check(state, 0) == "1 pods ready"
    assert pods_ready("other", "x=y", 1).check(state, 0) is None


def test_deleted_needs_a_listing_first():
    cond = deleted(NAMESPACE, "kt2t-x")
    state = ClusterState()
    assert cond.check(state, 0) is None  # nothing listed yet: absence proves nothing
    state.replace_all("Namespace", [{"metadata": {"name": "kt2t-x"}}])
    assert cond.check(state, 0) is None
    state.update("Namespace", "DELETED", {"metadata": {"name": "kt2t-x"}})
    assert cond.check(state, 0) == "namespace kt2t-x deleted"


def test_log_line_matches_returns_the_line_or_fails_when_the_log_ends():
    cond = log_line_matches("ns", "w-0", re.compile(r"saved checkpoint at step (\d+)"))
    (followed,) = cond.watches
    state = ClusterState()
    assert cond.check(state, 0) is None
    state.apply((LOG_LINE, followed, "saved checkpoint at step 5"))
    assert cond.check(state, 0) == "saved checkpoint at step 5"
    other = ClusterState()
    other.apply((LOG_END, followed, None))
    with pytest.raises(JobFailed, match="the log of w-0 ended without a line matching") as failed:
        cond.check(other, 0)
    assert failed.value.pod == "w-0"


def test_nodes_advertise_gpus_counts_ready_nodes_of_the_type():
    def gpu_node(name, gpus, ready="True", kind="p4d.24xlarge"):
        return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": kind}},
                "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                           "conditions": [{"type": "Ready", "status": ready}]}}

    cond = nodes_advertise_gpus("p4d.24xlarge", 2, 8)
    assert cond.check(state_of(gpu_node("a", 8), gpu_node("b", 0), kind="Node"), 0) is None
    assert cond.check(state_of(gpu_node("a", 8), gpu_node("b", 8, ready="False"), kind="Node"), 0) is None
    assert cond.check(state_of(gpu_node("a", 8), gpu_node("b", 8), kind="Node"), 0) == "2 nodes advertise GPUs"
