"""Node discovery: which nodes to use, and their GPUs and EFA devices, from the API server.

Rules follow the upstream nvidia suite: all nodes must share node.kubernetes.io/instance-type
unless NODE_TYPE picks one; GPU and EFA counts come from node capacity. Unlike upstream, GPU
capacity is waited for (bounded by DISCOVERY_TIMEOUT) rather than read as 0 before the device
plugin has advertised it, and the count per node is what the type should have (the table of
harness/verdict/thresholds.yaml, else the most any node advertises), never the minimum seen: a node that
lost a GPU does not lower the bar, it fails TestGPUCapacity. Values the user set are kept and
checked against the nodes. The result is a Topology; the configuration is left as the user gave it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from harness.cluster.cancel import CancelToken
from harness.cluster.client import Cluster
from harness.cluster.conditions import nodes_advertise_gpus
from harness.cluster.resources import NODE
from harness.cluster.wait import wait_for
from harness.config.settings import Config, Origin, Source
from harness.config.topology import (
    DEFAULT_TOLERATIONS,
    EFA_RESOURCE,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NodeInfo,
    Topology,
    describe_nodes,
)
from harness.config.values import format_duration
from harness.errors import ConfigError, Interrupted, WaitTimeout
from harness.verdict.capacity import expected_per_node


@dataclass(frozen=True)
class Selection:
    """The Ready nodes of the chosen type (all of them, by name) and how many of them to use."""

    node_type: str
    ready: list[NodeInfo]
    count: int
    origins: dict[str, Origin]
    # Every node of the type, whatever its state (NotReady, cordoned too), by name.
    of_type: list[NodeInfo] = field(default_factory=list)


def list_nodes(cluster: Cluster) -> list[NodeInfo]:
    return [NodeInfo.from_node(n) for n in cluster.list(NODE).get("items", [])]


def _node_type(ready: list[NodeInfo], cfg: Config) -> tuple[str, Origin]:
    """NODE_TYPE as given, else the one type every Ready node shares."""
    if cfg.node_type is not None:
        return cfg.node_type, cfg.origin("node_type")
    types = Counter(n.instance_type for n in ready)
    if len(types) > 1:
        found = ", ".join(f"{t} ({count} nodes)" for t, count in sorted(types.items()))
        raise ConfigError("discover nodes: Node types are not the same, all node types must be the "
                          f"same in the cluster: found {found}; set NODE_TYPE or --nodeType to pick one")
    return next(iter(types)), Origin(Source.DISCOVERED, INSTANCE_TYPE_LABEL)


def select_nodes(nodes: list[NodeInfo], cfg: Config) -> Selection:
    """The Ready nodes of the configured (or the only) instance type; ConfigError otherwise."""
    ready = [n for n in nodes if n.ready]
    if not ready:
        raise ConfigError(f"discover nodes: no Ready, schedulable node in the cluster (nodes: {describe_nodes(nodes)})")
    node_type, type_origin = _node_type(ready, cfg)
    chosen = sorted((n for n in ready if n.instance_type == node_type), key=lambda n: n.name)
    if not chosen:
        found = ", ".join(sorted({n.instance_type for n in ready})) or "none"
        raise ConfigError(f"discover nodes: no Ready node of type {node_type!r} "
                          f"(set by {type_origin.detail}); types found: {found}")
    of_type = sorted((n for n in nodes if n.instance_type == node_type), key=lambda n: n.name)
    if cfg.node_count is None:
        # The nodes of the type left out (NotReady, cordoned) are counted, so the source says so
        # and the `nodes` check of every training test names them (harness/verdict/nodes.py).
        count, count_origin = len(chosen), Origin(Source.DISCOVERED, f"Ready, schedulable {node_type} nodes: "
                                                                     f"{len(chosen)} of the {len(of_type)} of the type")
    elif cfg.node_count > len(chosen):
        raise ConfigError(f"discover nodes: NODE_COUNT={cfg.node_count} but only {len(chosen)} Ready "
                          f"{node_type} nodes: {describe_nodes(chosen)}")
    else:
        count, count_origin = cfg.node_count, cfg.origin("node_count")
    return Selection(node_type, chosen, count, {"node_type": type_origin, "node_count": count_origin}, of_type)


def _wait_for_gpus(cluster: Cluster, cfg: Config, selection: Selection, wanted: int,
                   cancel: CancelToken) -> Selection:
    """Wait (bounded by DISCOVERY_TIMEOUT) until enough nodes advertise `wanted` GPUs; select again."""
    try:
        wait_for(cluster, nodes_advertise_gpus(selection.node_type, selection.count, wanted),
                 timeout=cfg.discovery_timeout, cancel=cancel)
    except WaitTimeout:
        raise ConfigError(
            f"discover GPUs: fewer than {selection.count} {selection.node_type} nodes advertise "
            f">= {wanted} {GPU_RESOURCE} after {format_duration(cfg.discovery_timeout)} "
            f"(nodes: {describe_nodes(list_nodes(cluster))}); is the NVIDIA device plugin running? "
            "For a CPU-only cluster set ACCELERATOR=cpu") from None
    except Interrupted as exc:
        raise ConfigError(f"discover GPUs: {exc}") from None
    again = select_nodes(list_nodes(cluster), cfg)
    return Selection(again.node_type, again.ready, selection.count, selection.origins, again.of_type)


def _check_fits_node_type(selection: Selection, wanted: int) -> None:
    """More GPUs per node than the node type has is a configuration error at once: the device
    plugin, once up, advertises them all, so waiting only helps nodes that advertise none yet."""
    most = max((n.gpus for n in selection.ready), default=0)
    if 0 < most < wanted:
        raise ConfigError(f"discover GPUs: GPUS_PER_NODE={wanted} but the {selection.node_type} nodes have at most "
                          f"{most} {GPU_RESOURCE} each: a job of {selection.count} nodes x {wanted} GPUs does not "
                          f"fit this node type; set GPUS_PER_NODE to {most} or less")


def _gpus(cluster: Cluster, cfg: Config, selection: Selection, cancel: CancelToken,
          advertised: bool = True) -> tuple[list[NodeInfo], int, Origin]:
    """The nodes to use, GPUs (processes) per node and where that number came from. `advertised`
    False (a DRA suite): the GPUs are a DRA driver's devices, no node resource, so nothing is
    awaited: GPUS_PER_NODE, else the type's table (else what the nodes advertise, if any)."""
    if cfg.accelerator == "cpu":
        if cfg.gpus_per_node is not None:
            return selection.ready, cfg.gpus_per_node, cfg.origin("gpus_per_node")
        return selection.ready, 1, Origin(Source.DERIVED, "one process per node with ACCELERATOR=cpu")
    if not advertised:
        if cfg.gpus_per_node is not None:
            return selection.ready, cfg.gpus_per_node, cfg.origin("gpus_per_node")
        expected = expected_per_node(selection.node_type, selection.ready[: selection.count], GPU_RESOURCE)
        return selection.ready, max(expected.count, 1), Origin(
            Source.DERIVED if expected.from_table else Source.DISCOVERED,
            f"GPUs through DRA, not awaited as {GPU_RESOURCE}: {expected.source}")
    wanted = cfg.gpus_per_node or 1
    _check_fits_node_type(selection, wanted)
    if sum(1 for n in selection.ready if n.gpus >= wanted) < selection.count:
        selection = _wait_for_gpus(cluster, cfg, selection, wanted, cancel)
    usable = [n for n in selection.ready if n.gpus >= wanted]
    if cfg.gpus_per_node is not None:
        return usable, cfg.gpus_per_node, cfg.origin("gpus_per_node")
    # What the type should have, never the fewest seen: a node that lost a GPU must not lower the bar.
    expected = expected_per_node(selection.node_type, usable[: selection.count], GPU_RESOURCE)
    return usable, expected.count, Origin(Source.DERIVED if expected.from_table else Source.DISCOVERED,
                                          f"{GPU_RESOURCE}: {expected.source}")


def _efa(cfg: Config, node_type: str, chosen: list[NodeInfo]) -> tuple[int, Origin]:
    """EFA devices per node a node should have: EFA_PER_NODE checked against the nodes, else, when
    some node advertises EFA, what the type should have (the table, else the most any node
    advertises; never the fewest: TestGPUCapacity judges the nodes against it); none when no node
    advertises any. What a job requests is what its nodes have (job.efa_request)."""
    fewest = min(n.efa for n in chosen)
    if cfg.efa_per_node is not None:
        if cfg.efa_per_node > fewest:
            raise ConfigError(f"discover EFA: EFA_PER_NODE={cfg.efa_per_node} but the {node_type} "
                              f"nodes advertise {fewest} {EFA_RESOURCE}")
        return cfg.efa_per_node, cfg.origin("efa_per_node")
    if max(n.efa for n in chosen) == 0:
        if cfg.efa_enabled:
            raise ConfigError(f"discover EFA: --efaEnabled=true but no {node_type} node advertises {EFA_RESOURCE}")
        return 0, Origin(Source.DISCOVERED, f"no node advertises {EFA_RESOURCE}")
    expected = expected_per_node(node_type, chosen, EFA_RESOURCE)
    return expected.count, Origin(Source.DERIVED if expected.from_table else Source.DISCOVERED,
                                  f"{EFA_RESOURCE}: {expected.source}")


def discover(cluster: Cluster, cfg: Config, cancel: CancelToken, advertised: bool = True) -> Topology:
    """The nodes to use and what they offer; ConfigError when the cluster cannot run the suites.
    `advertised` False: the suite's GPUs come through DRA (harness.framework.suite.Suite.devices_by_dra)."""
    selection = select_nodes(list_nodes(cluster), cfg)
    usable, gpus, gpus_origin = _gpus(cluster, cfg, selection, cancel, advertised)
    chosen = usable[: selection.count]
    efa, efa_origin = _efa(cfg, selection.node_type, chosen)
    tolerations = pod_tolerations(cfg)
    states = tuple((n.name, tuple(n.problems(tolerations))) for n in selection.of_type)
    return Topology(selection.node_type, tuple(chosen), gpus, efa,
                    {**selection.origins, "gpus_per_node": gpus_origin, "efa_per_node": efa_origin}, states,
                    tuple(n.name for n in selection.of_type if n.emulated))


def pod_tolerations(cfg: Config) -> list[dict[str, str]]:
    """The tolerations every pod of the suite carries (harness/jobs/launchers/base.py pod_tolerations)."""
    return [*map(dict, DEFAULT_TOLERATIONS), *cfg.tolerations.as_pod_spec()]
