"""Every node of the type counted whatever its state (issue 34): the states discovery reads from
Node objects, the resolved configuration listing them, and the `nodes` and `multi_node` checks."""

from __future__ import annotations

from typing import Any

from harness.config.settings import Origin, Source, properties, resolve
from harness.config.topology import DEFAULT_TOLERATIONS, NodeInfo, Topology
from harness.framework.cli import parse_args
from harness.setup.discovery import discover, pod_tolerations
from harness.verdict.checks import Status
from harness.verdict.nodes import check_multi_node, check_nodes


def api_node(name: str, ready: bool = True, unschedulable: bool = False, taints: list[dict[str, str]] | None = None,
             gpus: tuple[int, int] = (0, 0), kind: str = "real-cpu") -> dict[str, Any]:
    capacity, allocatable = {"cpu": "4"}, {"cpu": "4"}
    if gpus[0]:
        capacity["nvidia.com/gpu"], allocatable["nvidia.com/gpu"] = str(gpus[0]), str(gpus[1])
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": kind}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"capacity": capacity, "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class Nodes:
    """Cluster.list(NODE) and nothing else: what discover() asks of a CPU-only cluster."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes = list(nodes)

    def list(self, resource: object) -> dict[str, Any]:
        return {"items": self.nodes}


def discovered(env: dict[str, str], *nodes: dict[str, Any]) -> Topology:
    cfg = resolve(parse_args([]), {"ACCELERATOR": "cpu", **env})
    return discover(Nodes(*nodes), cfg, None)  # type: ignore[arg-type]


def test_each_state_is_named_and_tolerated_taints_and_prefer_no_schedule_are_not():
    tolerations = list(DEFAULT_TOLERATIONS)
    assert NodeInfo.from_node(api_node("a")).problems(tolerations) == []
    assert NodeInfo.from_node(api_node("a", ready=False)).problems(tolerations) == ["NotReady"]
    cordoned = api_node("a", unschedulable=True, taints=[{"key": "node.kubernetes.io/unschedulable",
                                                           "effect": "NoSchedule"}])
    assert NodeInfo.from_node(cordoned).problems(tolerations) == ["cordoned (spec.unschedulable)"]
    tainted = api_node("a", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                    {"key": "kubetest2-training.local/stand-in", "value": "kwok",
                                     "effect": "PreferNoSchedule"}])
    assert NodeInfo.from_node(tainted).problems(tolerations) == ["taint dedicated=ml:NoSchedule not tolerated"]
    cfg = resolve(parse_args([]), {"TOLERATIONS": "dedicated=ml:NoSchedule"})
    assert NodeInfo.from_node(tainted).problems(pod_tolerations(cfg)) == []
    short = api_node("a", gpus=(8, 7))
    assert NodeInfo.from_node(short).problems(tolerations) == ["7 of 8 nvidia.com/gpu allocatable"]
    gone = api_node("a", ready=False, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    assert NodeInfo.from_node(gone).problems(tolerations) == ["NotReady"]  # the taint only repeats it


def test_a_not_ready_node_of_the_type_is_listed_and_fails_the_nodes_check():
    """The issue's run: real-cpu-1 NotReady; BERT on real-cpu-0 alone passed. Now it is named."""
    topology = discovered({"NODE_TYPE": "real-cpu"}, api_node("real-cpu-0"), api_node("real-cpu-1", ready=False),
                          api_node("other-0", kind="other"))
    assert topology.node_names == ("real-cpu-0",)
    props = properties(topology.resolved())
    assert props["config.nodes_of_type"] == "real-cpu-0=Ready, real-cpu-1=NotReady"
    assert props["config.node_count.source"].endswith("real-cpu nodes: 1 of the 2 of the type")
    check = check_nodes(topology)
    assert check.status is Status.FAIL, check
    assert "uses 1 of the 2 real-cpu nodes" in check.message and "real-cpu-1 (NotReady)" in check.message
    multi = check_multi_node(topology, ["real-cpu-0", "real-cpu-0"])
    assert multi.status is Status.FAIL and "no traffic crossed a node" in multi.message, multi


def test_node_count_set_lower_by_the_user_passes_and_says_so():
    topology = discovered({"NODE_COUNT": "1"}, api_node("real-cpu-0"), api_node("real-cpu-1", ready=False))
    check = check_nodes(topology)
    assert check.status is Status.PASS and "the user's choice (NODE_COUNT=1 (env: NODE_COUNT))" in check.message
    assert "real-cpu-1 (NotReady)" in check.message
    multi = check_multi_node(topology, ["real-cpu-0"])
    assert multi.status is Status.PASS and "user's choice" in multi.message, multi


def test_healthy_nodes_pass_both_and_a_degraded_node_in_the_run_fails():
    topology = discovered({}, api_node("a"), api_node("b"))
    assert check_nodes(topology).status is Status.PASS
    assert check_multi_node(topology, ["a", "b"]).status is Status.PASS
    tainted = discovered({}, api_node("a"), api_node("b", taints=[{"key": "x", "effect": "NoExecute"}]),
                         api_node("c", unschedulable=True))
    check = check_nodes(tainted)
    assert check.status is Status.FAIL, check
    assert "b (taint x:NoExecute not tolerated)" in check.message
    assert "left out: c (cordoned (spec.unschedulable))" in check.message


def test_without_the_list_the_nodes_check_does_not_apply():
    topology = Topology("t", (NodeInfo("a", "t", 0, 0, True),), 1, 0, {"node_count": Origin(Source.ENV, "NODE_COUNT")})
    assert check_nodes(topology).status is Status.NOT_APPLICABLE


def test_kwok_nodes_are_discovered_as_emulated_and_real_ones_are_not():
    """kwok's nodes (annotated kwok.x-k8s.io/node) have written capacity: discovery lists them so the
    checks judged on capacity can say so (tests/unit/harness/report/test_results.py follows them to the report)."""
    kwok = api_node("kwok-cpu-0", kind="kwok-cpu")
    kwok["metadata"]["annotations"] = {"kwok.x-k8s.io/node": "fake"}
    assert NodeInfo.from_node(kwok).emulated and not NodeInfo.from_node(api_node("real-cpu-0")).emulated
    topology = discovered({}, kwok, api_node("kwok-cpu-1", kind="kwok-cpu"))
    assert topology.emulated == ("kwok-cpu-0",)
    assert topology.resolved()["nodes_emulated"].value == "kwok-cpu-0"
    assert "nodes_emulated" not in discovered({}, api_node("real-cpu-0")).resolved()
