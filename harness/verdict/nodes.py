"""The `nodes` and `multi_node` checks of every training test (docs/DEGRADED-CLUSTERS.md).

A gate that passes a cluster which just lost a node is worse than none: discovery uses the Ready,
schedulable nodes of the type, so a NotReady or cordoned node quietly shrinks the job (issue 34:
BERT passed on one of two nodes). `nodes` fails when the run uses fewer nodes than the type has, or
uses one its pods cannot use fully, naming each node and why, unless NODE_COUNT (the user's choice)
asked for fewer. `multi_node` fails a training job whose pods all ran on one node, unless the
user set NODE_COUNT=1: no traffic crossed a node, so the multi-node path went untested.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.config.topology import NODES_DESCRIBED, Topology
from harness.verdict.checks import Check, declare

NODES = declare(
    "nodes",
    "the run uses fewer nodes than the type has (NotReady, cordoned, an untolerated taint, fewer GPUs or EFA "
    "allocatable than capacity), or one its pods cannot use fully, each such node named with why; fewer nodes asked "
    "for by the user's `NODE_COUNT` pass",
    "docs/DEGRADED-CLUSTERS.md",
    settings=("NODE_COUNT", "NODE_TYPE", "TOLERATIONS"),
)
MULTI_NODE = declare(
    "multi_node",
    "a multi-node job's pods all ran on one node: no traffic crossed a node (passes when the user set `NODE_COUNT=1`)",
    "-",
    settings=("NODE_COUNT",),
)


def _named(nodes: list[tuple[str, str]]) -> str:
    """`a (NotReady), b (cordoned)`, the first NODES_DESCRIBED, then how many more."""
    shown = ", ".join(f"{name} ({why})" for name, why in nodes[:NODES_DESCRIBED])
    return shown + (f" and {len(nodes) - NODES_DESCRIBED} more" if len(nodes) > NODES_DESCRIBED else "")


def _count_source(topology: Topology) -> str:
    origin = topology.origins.get("node_count")
    return f"NODE_COUNT={topology.node_count} ({origin})" if origin is not None else f"{topology.node_count} nodes"


def check_nodes(topology: Topology) -> Check:
    """Every node of the type used, and usable, unless the user asked for fewer (module docstring)."""
    if not topology.nodes_of_type:
        return NODES.not_applicable("the nodes of the type were not listed (no discovery)")
    in_run = set(topology.node_names)
    of_type = len(topology.nodes_of_type)
    kind = topology.node_type
    left_out = [(name, "; ".join(problems) or "left out by discovery")
                for name, problems in topology.nodes_of_type if name not in in_run]
    degraded = [(name, "; ".join(problems)) for name, problems in topology.nodes_of_type
                if name in in_run and problems]
    if degraded:
        also = f"; left out: {_named(left_out)}" if left_out else ""
        return NODES.failed(f"{len(degraded)} of the run's {topology.node_count} {kind} nodes cannot be "
                                     f"used fully: {_named(degraded)}{also}")
    if left_out and not topology.user_set_count:
        return NODES.failed(f"the run uses {topology.node_count} of the {of_type} {kind} nodes "
                                     f"({_count_source(topology)}); left out: {_named(left_out)}; fix those nodes, "
                                     "or set NODE_COUNT to run on fewer on purpose")
    if left_out:
        return NODES.passed(f"the run uses {topology.node_count} of the {of_type} {kind} nodes: the user's "
                                     f"choice ({_count_source(topology)}); not used: {_named(left_out)}")
    return NODES.passed(f"the run uses all {of_type} {kind} nodes, every one Ready, schedulable and "
                                 "with all its devices allocatable")


def check_multi_node(topology: Topology, pod_nodes: Iterable[str]) -> Check:
    """The job's (worker) pods on more than one node, unless the user set NODE_COUNT=1."""
    nodes = sorted({n for n in pod_nodes if n and not n.startswith("<")})
    if len(nodes) > 1:
        more = " and more" if len(nodes) > NODES_DESCRIBED else ""
        return MULTI_NODE.passed(f"the job's pods ran on {len(nodes)} nodes: "
                                          f"{', '.join(nodes[:NODES_DESCRIBED])}{more}")
    where = f"on one node ({nodes[0]})" if nodes else "on no node seen"
    if topology.node_count == 1 and topology.user_set_count:
        return MULTI_NODE.passed(f"the job ran {where}: the user's choice ({_count_source(topology)}); "
                                          "no traffic between nodes was expected")
    return MULTI_NODE.failed(f"the multi-node job ran {where}: no traffic crossed a node, so the path "
                                      f"between nodes was not tested ({_count_source(topology)}, "
                                      f"{len(topology.nodes_of_type) or topology.node_count} {topology.node_type} "
                                      "nodes of the type); set NODE_COUNT=1 to run on one node on purpose")
