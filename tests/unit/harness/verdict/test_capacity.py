"""GPU and EFA capacity judged against what the node type should have: a degraded node never lowers
the bar, it is named with what it advertises."""

from __future__ import annotations

from harness.config.settings import Origin, Source
from harness.config.topology import EFA_RESOURCE, GPU_RESOURCE, NodeInfo, Topology
from harness.verdict.capacity import Expected, check_advertised, check_gpus_seen, expected_per_node, judge_advertised
from harness.verdict.checks import Status


def node(name: str, kind: str = "p4d.24xlarge", gpus: int = 8, efa: int = 4) -> NodeInfo:
    return NodeInfo(name, kind, gpus, efa, True)


def test_a_node_that_lost_a_gpu_fails_naming_it_and_what_it_advertises():
    nodes = [node("ip-10-0-1-5"), node("ip-10-0-1-6", gpus=7)]
    expected = expected_per_node("p4d.24xlarge", nodes, GPU_RESOURCE)
    assert (expected.count, expected.from_table) == (8, True)
    check = check_advertised(nodes, GPU_RESOURCE, expected)
    assert check.status is Status.FAIL
    assert check.message.startswith("capacity: node ip-10-0-1-6 has 7 allocatable nvidia.com/gpu, expected 8 per node "
                                    "(p4d.24xlarge table in harness/verdict/thresholds.yaml (source aws-ec2-specs))")


def test_an_unknown_type_takes_the_most_advertised_not_the_fewest():
    nodes = [node("a", "custom", gpus=7), node("b", "custom", gpus=8)]
    expected = expected_per_node("custom", nodes, GPU_RESOURCE)
    assert (expected.count, expected.from_table) == (8, False)
    assert "node a has 7 allocatable" in check_advertised(nodes, GPU_RESOURCE, expected).message


def test_efa_is_judged_when_in_use_and_not_applicable_otherwise():
    origins = {"gpus_per_node": Origin(Source.DERIVED, "nvidia.com/gpu: p5.48xlarge table"),
               "efa_per_node": Origin(Source.DERIVED, "vpc.amazonaws.com/efa: p5.48xlarge table")}
    nodes = (node("a", "p5.48xlarge", efa=32), node("b", "p5.48xlarge", efa=31))
    verdict = judge_advertised(Topology("p5.48xlarge", nodes, 8, 32, origins))
    (efa,) = verdict.failures
    assert efa.name == "capacity.efa" and "node b has 31 allocatable vpc.amazonaws.com/efa, expected 32" in efa.message
    origins["efa_per_node"] = Origin(Source.DISCOVERED, "no node advertises vpc.amazonaws.com/efa")
    verdict = judge_advertised(Topology("p5.48xlarge", (node("a", efa=0),), 8, 0, origins))
    assert verdict.passed and verdict.checks[1].status is Status.NOT_APPLICABLE
    assert check_advertised([node("a", efa=2)], EFA_RESOURCE, Expected(2, "EFA_PER_NODE", False)).status is Status.PASS


def test_each_pod_must_see_every_gpu_of_its_node():
    check = check_gpus_seen([("p0", "a", 8), ("p1", "b", 6)], 8)
    assert check.message == "capacity: pod p1 on node b sees 6 GPUs, expected 8"
    assert check_gpus_seen([("p0", "a", 8)], 8).status is Status.PASS


def api_node(name: str, allocatable: dict[str, str] | None, capacity: dict[str, str]) -> dict:
    status = {"capacity": capacity, "conditions": [{"type": "Ready", "status": "True"}]}
    if allocatable is not None:
        status["allocatable"] = allocatable
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "status": status}


def test_a_gpu_the_device_plugin_marked_unhealthy_does_not_count_and_both_numbers_are_said():
    # The device plugin reports an unhealthy GPU: it stays in capacity, leaves allocatable.
    degraded = NodeInfo.from_node(api_node("ip-10-0-1-6", {GPU_RESOURCE: "7", EFA_RESOURCE: "32"},
                                           {GPU_RESOURCE: "8", EFA_RESOURCE: "32"}))
    healthy = NodeInfo.from_node(api_node("ip-10-0-1-5", {GPU_RESOURCE: "8", EFA_RESOURCE: "32"},
                                          {GPU_RESOURCE: "8", EFA_RESOURCE: "32"}))
    assert (degraded.gpus, degraded.capacity_of(GPU_RESOURCE), degraded.efa) == (7, 8, 32)
    check = check_advertised([healthy, degraded], GPU_RESOURCE, expected_per_node("p5.48xlarge", [], GPU_RESOURCE))
    assert check.status is Status.FAIL
    assert check.message.startswith("capacity: node ip-10-0-1-6 has 7 allocatable nvidia.com/gpu (capacity 8): 1 not "
                                    "allocatable (unhealthy, as the device plugin reports), expected 8 per node"), \
        check.message
    assert "ip-10-0-1-5" not in check.message


def test_a_node_without_allocatable_yet_is_read_from_capacity():
    info = NodeInfo.from_node(api_node("n", None, {GPU_RESOURCE: "8"}))
    assert (info.gpus, info.capacity_of(GPU_RESOURCE)) == (8, 8)
