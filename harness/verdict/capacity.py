"""What every node of a type should advertise (GPUs, EFA devices), and the nodes that fall short.

A node's count is its allocatable (NodeInfo: a GPU the device plugin marked unhealthy is not
allocatable); a node that falls short is named with both its allocatable and its capacity.

The bar comes from the node type's row of harness/verdict/thresholds.yaml (the AWS EC2 specifications)
or, for a type that is not listed, the most any node of that type advertises: never the
minimum, so a node that lost a GPU cannot lower the bar. GPUS_PER_NODE / EFA_PER_NODE set
explicitly still win (the caller passes them as the expected value).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.config.topology import EFA_RESOURCE, GPU_RESOURCE, NODES_DESCRIBED, NodeInfo, Topology
from harness.verdict.checks import Check, Verdict, declare
from harness.verdict.thresholds import node_type

CAPACITY_GPUS = declare(
    "capacity.gpus",
    "a node advertises fewer allocatable `nvidia.com/gpu` than its type should have (each short node named, and how "
    "many are not allocatable)",
    "`GPUS_PER_NODE`, else the table (Capacity, docs/TESTS.md), else the most any node of the type advertises; never "
    "the minimum",
    settings=("GPUS_PER_NODE", "NODE_TYPE"),
)
CAPACITY_EFA = declare(
    "capacity.efa",
    "with EFA in use: a node advertises fewer allocatable `vpc.amazonaws.com/efa` than its type should have (not "
    "applicable without EFA)",
    "`EFA_PER_NODE`, else the table (Capacity, docs/TESTS.md), else the most any node of the type advertises",
    settings=("EFA_PER_NODE", "NODE_TYPE"),
)
CAPACITY_GPUS_SEEN = declare(
    "capacity.gpus_seen",
    "a pod on a node lists (`nvidia-smi -L`) another number of GPUs than its node should have: fewer or more",
    "as `capacity.gpus`",
    settings=("GPUS_PER_NODE", "NODE_TYPE"),
)


@dataclass(frozen=True)
class Expected:
    """An expected count per node and where it came from."""

    count: int
    source: str
    from_table: bool


def expected_per_node(type_name: str, nodes: Iterable[NodeInfo], resource: str) -> Expected:
    """The node type's table value for `resource` (GPUs or EFA), else the maximum advertised."""
    row = node_type(type_name)
    listed = row.gpus if resource == GPU_RESOURCE else row.efa
    if listed is not None:
        return Expected(listed, f"{type_name} table in harness/verdict/thresholds.yaml (source {row.capacity_source})",
                        True)
    counts = [n.gpus if resource == GPU_RESOURCE else n.efa for n in nodes]
    return Expected(max(counts, default=0),
                    f"the most any of the {len(counts)} {type_name} nodes advertises ({type_name} is not in "
                    "harness/verdict/thresholds.yaml)", False)


def _unusable(node: NodeInfo, resource: str) -> str:
    missing = node.capacity_of(resource) - node.allocatable_of(resource)
    return f": {missing} not allocatable (unhealthy, as the device plugin reports)" if missing > 0 else ""


def check_advertised(nodes: Iterable[NodeInfo], resource: str, expected: Expected) -> Check:
    """Every node advertises at least the expected count of `resource`; the short ones are named."""
    kind = CAPACITY_GPUS if resource == GPU_RESOURCE else CAPACITY_EFA
    nodes = list(nodes)
    short = [f"node {n.name} has {n.describe(resource)}" + _unusable(n, resource)
             for n in nodes if n.allocatable_of(resource) < expected.count]
    if short:
        return kind.failed(f"capacity: {'; '.join(short)}, expected {expected.count} per node "
                                  f"({expected.source})", expected=expected.count)
    return kind.passed(f"all {len(nodes)} nodes have >= {expected.count} allocatable {resource} "
                              f"({expected.source})", expected=expected.count)


def judge_advertised(topology: Topology) -> Verdict:
    """Every node of the topology advertises the GPUs and (when EFA is in use) the EFA devices that
    discovery expects of the type (its table row or the most advertised; the setting when given)."""
    origins = topology.origins
    gpus = Expected(topology.gpus_per_node, str(origins.get("gpus_per_node", "")), False)
    verdict = Verdict([check_advertised(topology.nodes, GPU_RESOURCE, gpus)])
    if topology.efa_per_node:
        efa = Expected(topology.efa_per_node, str(origins.get("efa_per_node", "")), False)
        verdict.add(check_advertised(topology.nodes, EFA_RESOURCE, efa))
    else:
        verdict.add(CAPACITY_EFA.not_applicable(f"EFA not in use ({origins.get('efa_per_node', 'none')})"))
    return verdict


# The checks judged on what nodes advertise (state, capacity, allocatable), by name: on kwok's nodes
# that is emulated (Topology.emulated). gpu_sharing.advertised reads the allocatable that the local
# cluster's GPU-sharing emulation writes on them.
NODE_CAPACITY_CHECKS = frozenset({"nodes", "capacity.gpus", "capacity.efa", "gpu_sharing.advertised"})


def mark_emulated(verdict: Verdict, topology: Topology) -> None:
    """Mark the verdict's NODE_CAPACITY_CHECKS as judged on emulated capacity when nodes of the type
    are kwok's: a pass there proves the harness's logic, not the cluster's devices."""
    if not topology.emulated:
        return
    more = f" and {len(topology.emulated) - NODES_DESCRIBED} more" if len(topology.emulated) > NODES_DESCRIBED else ""
    what = (f"capacity of kwok node(s) {', '.join(topology.emulated[:NODES_DESCRIBED])}{more}, written by whoever "
            "made them, not counted by a device plugin")
    verdict.checks[:] = [c.on_emulated(what) if c.name in NODE_CAPACITY_CHECKS and not c.execution else c
                         for c in verdict.checks]


def check_gpus_seen(seen: Iterable[tuple[str, str, int]], expected: int) -> Check:
    """Each pod (pod, node, GPUs it listed) saw exactly the GPUs its node should have."""
    seen = list(seen)
    problems = [f"pod {pod} on node {node} sees {count} GPUs" for pod, node, count in seen if count != expected]
    if problems:
        return CAPACITY_GPUS_SEEN.failed(f"capacity: {'; '.join(problems)}, expected {expected}")
    return CAPACITY_GPUS_SEEN.passed(f"a pod on each of {len(seen)} nodes sees {expected} GPUs")
