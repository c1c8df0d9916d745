"""Conditions re-derive only what changed (bench/harness_costs.py cpu), with the same answers."""

from __future__ import annotations

from harness.cluster import conditions
from harness.cluster.conditions import any_pod_failed, node_not_ready, nodes_advertise_gpus
from harness.cluster.watch import ClusterState


def pod(name, version, phase="Running", waiting=None, exit_code=None):
    state = {"waiting": {"reason": waiting}} if waiting else {}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error"}}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "containerStatuses": [{"name": "w", "state": state}]}}


def node(name, version, ready):
    return {"metadata": {"name": name, "resourceVersion": version},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady"}]}}


def test_a_new_version_of_a_pod_is_judged_again():
    state, cond = ClusterState(), any_pod_failed("ns", "x=y", 60)
    state.replace_all("Pod", [pod("w-0", "1"), pod("w-1", "1")])
    assert cond.check(state, 0) is None
    state.update("Pod", "MODIFIED", pod("w-1", "2", phase="Failed", exit_code=3))
    assert cond.check(state, 0) == "pod w-1 on node n1 failed: container w exited with code 3 (Error)"
    assert cond.blame(state, 0) == "w-1"
    state.update("Pod", "DELETED", pod("w-1", "3"))
    assert cond.check(state, 0) is None


def test_the_first_failure_in_name_order_is_named_whatever_the_order_of_events():
    state, cond = ClusterState(), any_pod_failed("ns", "x=y", 60)
    state.replace_all("Pod", [pod("w-0", "1"), pod("w-1", "1")])
    state.update("Pod", "MODIFIED", pod("w-1", "2", phase="Failed", exit_code=1))
    assert cond.blame(state, 0) == "w-1"
    state.update("Pod", "MODIFIED", pod("w-0", "3", phase="Failed", exit_code=2))
    assert cond.blame(state, 0) == "w-0"
    state.replace_all("Pod", [pod("w-1", "2", phase="Failed", exit_code=1)])  # re-listed: w-0 gone
    assert cond.blame(state, 0) == "w-1"


def test_a_grace_period_runs_out_without_a_new_version():
    state, cond = ClusterState(), any_pod_failed("ns", "x=y", 60)
    state.replace_all("Pod", [pod("w-0", "1", phase="Pending", waiting="ImagePullBackOff")])
    assert cond.check(state, 100.0) is None
    assert cond.check(state, 130.0) is None
    assert "ImagePullBackOff for 61s" in cond.check(state, 161.0)


def test_a_node_turning_not_ready_is_seen():
    state, cond = ClusterState(), node_not_ready(["n1", "n2"])
    state.replace_all("Node", [node("n1", "1", "True"), node("n2", "1", "True")])
    assert cond.check(state, 0) is None
    state.update("Node", "MODIFIED", node("n2", "2", "False"))
    assert cond.check(state, 0) == "node n2 is NotReady: KubeletNotReady"
    state.update("Node", "MODIFIED", node("n2", "3", "True"))
    assert cond.check(state, 0) is None
    state.update("Node", "DELETED", node("n1", "4", "True"))
    assert cond.check(state, 0) == "node n1 was removed from the cluster"


def test_of_kind_is_sorted_and_follows_additions_and_deletions():
    state = ClusterState()
    state.replace_all("Pod", [pod("b", "1"), pod("a", "1")])
    assert [p["metadata"]["name"] for p in state.of_kind("Pod")] == ["a", "b"]
    state.update("Pod", "ADDED", pod("aa", "2"))
    state.update("Pod", "MODIFIED", pod("b", "3", phase="Succeeded"))
    assert [p["metadata"]["name"] for p in state.of_kind("Pod")] == ["a", "aa", "b"]
    assert state.of_kind("Pod")[2]["status"]["phase"] == "Succeeded"
    state.update("Pod", "DELETED", pod("a", "4"))
    assert [p["metadata"]["name"] for p in state.of_kind("Pod")] == ["aa", "b"]
    assert state.of_kind("Node") == []


def gpu_node(name, version, gpus, ready="True"):
    return {"metadata": {"name": name, "resourceVersion": version,
                         "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": ready}]}}


def test_nodes_advertising_gpus_are_counted_from_their_changes_alone(monkeypatch):
    """While discovery waits on 1,000 nodes, one node's update judges that node, not all of them;
    the answers follow every kind of change (a GPU appearing, NotReady, deletion, a re-list)."""
    state, cond = ClusterState(), nodes_advertise_gpus("p5.48xlarge", 3, 8)
    state.replace_all("Node", [gpu_node(f"n{i}", "1", 0) for i in range(1000)])
    assert cond.check(state, 0) is None
    judged = []
    real = conditions.NodeInfo.from_node
    monkeypatch.setattr(conditions.NodeInfo, "from_node", staticmethod(lambda n: judged.append(n) or real(n)))
    for i, version in ((1, "2"), (2, "2"), (3, "2")):
        state.update("Node", "MODIFIED", gpu_node(f"n{i}", version, 8))
        assert cond.check(state, 0) == (None if i < 3 else "3 nodes advertise GPUs")
    assert len(judged) == 3
    state.update("Node", "MODIFIED", gpu_node("n2", "3", 8, ready="False"))
    assert cond.check(state, 0) is None
    state.update("Node", "MODIFIED", gpu_node("n4", "2", 8))
    assert cond.check(state, 0) == "3 nodes advertise GPUs"
    state.update("Node", "DELETED", gpu_node("n4", "3", 8))
    assert cond.check(state, 0) is None
    state.replace_all("Node", [gpu_node(f"n{i}", "9", 8) for i in range(3)])  # re-listed after a 410
    assert cond.check(state, 0) == "3 nodes advertise GPUs"
