"""Scale behaviours on canned objects (through the binary on the local cluster:
tests/integration/suites/test_scale_behaviour.py): a job larger than the node type refused at discovery,
partial scheduling reported with how many pods are pending and why, messages that stay short with
a thousand nodes, per-pod canned logs by index."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.cancel import CancelToken
from harness.cluster.conditions import any_pod_failed
from harness.cluster.watch import ClusterState
from harness.config.settings import resolve
from harness.config.topology import describe_nodes
from harness.errors import ClusterError, ConfigError
from harness.framework.cli import parse_args
from harness.setup.discovery import discover

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from localcluster.emulation.canned_pods import CannedPods

UNSCHEDULABLE = "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) were unschedulable."


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p4d.24xlarge"}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


class NodesOnly:
    """A cluster that only lists nodes: discovery must decide before it waits or creates anything."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes

    def list(self, *_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return {"items": self.nodes, "metadata": {"resourceVersion": "1"}}


def discover_with(env: dict[str, str], nodes: list[dict[str, Any]]) -> Any:
    return discover(NodesOnly(nodes), resolve(parse_args([]), env), CancelToken())  # type: ignore[arg-type]


def test_more_gpus_per_node_than_the_node_type_has_is_refused_at_once():
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    with pytest.raises(ConfigError, match=r"GPUS_PER_NODE=16 but the p4d.24xlarge nodes have at most 8 "
                                          r"nvidia.com/gpu each: a job of 4 nodes x 16 GPUs does not fit"):
        discover_with({"GPUS_PER_NODE": "16", "DISCOVERY_TIMEOUT": "1h"}, nodes)
    assert discover_with({"GPUS_PER_NODE": "8"}, nodes).gpus_per_node == 8


def test_nodes_that_advertise_no_gpus_yet_are_still_waited_for():
    # No node advertises any: the device plugin may not be up; discovery waits (here: the fake
    # cluster cannot watch, so reaching the wait is what shows it did not refuse at once).
    with pytest.raises(ClusterError, match="wait for 1 p4d.24xlarge nodes to advertise >= 16 nvidia.com/gpu"):
        discover_with({"GPUS_PER_NODE": "16"}, [gpu_node("n0", gpus=0)])


def test_node_count_above_the_nodes_names_ten_and_counts_the_rest():
    nodes = [gpu_node(f"n{i:04d}") for i in range(1000)]
    with pytest.raises(ConfigError) as raised:
        discover_with({"NODE_COUNT": "1001"}, nodes)
    message = str(raised.value)
    assert "NODE_COUNT=1001 but only 1000 Ready p4d.24xlarge nodes" in message
    assert "n0009 (p4d.24xlarge" in message and "n0010" not in message and message.endswith("and 990 more")
    assert len(message) < 1000
    assert describe_nodes([]) == "none"


def pod(name: str, unschedulable: str | None = None) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}] \
        if unschedulable else [{"type": "PodScheduled", "status": "True"}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"nodeName": None if unschedulable else "n0"},
            "status": {"phase": "Pending" if unschedulable else "Running", "conditions": conditions}}


def test_partial_scheduling_says_how_many_pods_are_pending_and_why():
    pods = [pod("w-0"), pod("w-1"), pod("w-2", UNSCHEDULABLE), pod("w-3", UNSCHEDULABLE),
            pod("w-4", "0/4 nodes are available: 4 node(s) had untolerated taint.")]
    state = ClusterState()
    state.replace_all("Pod", pods)
    condition = any_pod_failed("ns", "job=x", grace=30)
    assert condition.check(state, 0.0) is None  # within the grace
    message = condition.check(state, 31.0)
    assert message == (f"3 of 5 pods Pending, unschedulable past POD_FAILURE_GRACE (30s): pod w-2 unschedulable "
                       f"for 31s: {UNSCHEDULABLE}; other reasons: 1 pod(s): 0/4 nodes are available: 4 node(s) "
                       "had untolerated taint.")
    assert condition.blame(state, 31.0) == "w-2"
    state.update("Pod", "MODIFIED", {**pod("w-2"), "metadata": {**pod("w-2")["metadata"], "resourceVersion": "2"}})
    assert condition.check(state, 40.0).startswith("2 of 5 pods Pending")  # w-2 was placed after all


def canned(pod_meta: dict[str, Any], tmp_path: Path) -> list[str]:
    (tmp_path / "run-3.log").write_text("pod three\n")
    pods = CannedPods(api=None, files=None, canned_logs_dir=tmp_path, default_canned_log="x")  # type: ignore[arg-type]
    return pods.lines({"metadata": {"name": "p", **pod_meta}}, "worker")


def test_a_canned_log_name_with_index_serves_each_pod_of_a_job_its_own_log(tmp_path: Path):
    template = {"kubetest2-training.local/canned-log-worker": "run-{index}"}
    indexed = {"annotations": {**template, "batch.kubernetes.io/job-completion-index": "3"}}
    assert canned(indexed, tmp_path) == ["pod three"]
    replica = {"annotations": template, "labels": {"training.kubeflow.org/replica-index": "3"}}
    assert canned(replica, tmp_path) == ["pod three"]
    (line,) = canned({"annotations": template}, tmp_path)
    assert "names the pod's index, and pod p has none" in line


class LogServer:
    """A cluster whose pods/log answers are canned: what capture_pod_logs reads, no API server."""

    def __init__(self, logs: dict[str, bytes]) -> None:
        self.logs = logs

    def open_stream(self, path: str, _query: dict[str, str], **_kwargs: Any) -> Any:
        body = self.logs[path.split("/")[-2]]

        class Response:
            def stream(self, size: int, decode_content: bool = True) -> Any:
                return iter([body[i:i + size] for i in range(0, len(body), size)])

            def release_conn(self) -> None:
                pass

        return Response()


def test_each_log_is_scanned_as_it_is_captured_and_gives_the_metrics_a_later_scan_would(tmp_path: Path):
    from harness.cluster.logs import capture_pod_logs
    from harness.jobs.job_metrics import LogScans, job_metrics

    def line(rank: int) -> bytes:
        return f'KT2T_METRICS {{"workload": "bert", "rank": {rank}, "throughput": {100 + rank}}}\n'.encode()

    pods = [{"metadata": {"name": f"w-{i}"}, "spec": {"nodeName": f"n{i}", "containers": [{"name": "worker"}]},
             "status": {}} for i in range(3)]
    server = LogServer({f"w-{i}": line(2 * i) + line(2 * i + 1) for i in range(3)})
    scans = LogScans()
    captured = capture_pod_logs(server, "ns", pods, tmp_path, on_captured=scans.add)  # type: ignore[arg-type]
    assert len(scans._scans) == 3  # every log scanned in the capture's workers
    locations = {rank: (f"w-{rank // 2}", f"n{rank // 2}") for rank in range(6)}
    overlapped = job_metrics(captured, locations, scans=scans).as_dict()
    assert overlapped == job_metrics(captured, locations).as_dict()
    assert [r["throughput"] for r in overlapped["ranks"]] == [100, 101, 102, 103, 104, 105]
