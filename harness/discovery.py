"""Node discovery: which nodes to use, and their GPUs and EFA devices, from the API server.

Rules follow the upstream nvidia suite: all nodes must share node.kubernetes.io/instance-type
unless NODE_TYPE picks one; GPU and EFA counts come from node capacity. Unlike upstream, GPU
capacity is waited for (bounded by DISCOVERY_TIMEOUT) rather than read as 0 before the device
plugin has advertised it. Values the user set are kept and checked against the nodes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from harness.cancel import CancelToken
from harness.cluster import NODE, Cluster, Obj
from harness.config import Config, Source, format_duration
from harness.errors import ConfigError, Interrupted, WaitTimeout
from harness.wait import ClusterState, Condition, Watched, wait_for

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    instance_type: str
    gpus: int
    efa: int
    ready: bool

    @classmethod
    def from_node(cls, node: Obj) -> NodeInfo:
        capacity = node.get("status", {}).get("capacity") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in node.get("status", {}).get("conditions") or [])
        schedulable = not node.get("spec", {}).get("unschedulable", False)
        return cls(
            name=node["metadata"]["name"],
            instance_type=(node["metadata"].get("labels") or {}).get(INSTANCE_TYPE_LABEL, "<unlabelled>"),
            gpus=_quantity(capacity.get(GPU_RESOURCE)),
            efa=_quantity(capacity.get(EFA_RESOURCE)),
            ready=ready and schedulable,
        )


def _quantity(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _describe(nodes: list[NodeInfo]) -> str:
    return ", ".join(f"{n.name} ({n.instance_type}, {n.gpus} GPUs, {'Ready' if n.ready else 'NotReady'})"
                     for n in nodes) or "none"


def select_nodes(nodes: list[NodeInfo], cfg: Config) -> list[NodeInfo]:
    """The Ready nodes of the configured (or the only) instance type; ConfigError otherwise."""
    ready = [n for n in nodes if n.ready]
    if not ready:
        raise ConfigError(f"discover nodes: no Ready, schedulable node in the cluster (nodes: {_describe(nodes)})")
    types = Counter(n.instance_type for n in ready)
    if cfg.node_type is None:
        if len(types) > 1:
            found = ", ".join(f"{t} ({count} nodes)" for t, count in sorted(types.items()))
            raise ConfigError("discover nodes: Node types are not the same, all node types must be the "
                              f"same in the cluster: found {found}; set NODE_TYPE or --nodeType to pick one")
        cfg.set("node_type", next(iter(types)), Source.DISCOVERED, INSTANCE_TYPE_LABEL)
    chosen = sorted((n for n in ready if n.instance_type == cfg.node_type), key=lambda n: n.name)
    if not chosen:
        found = ", ".join(sorted(types)) or "none"
        raise ConfigError(f"discover nodes: no Ready node of type {cfg.node_type!r} "
                          f"(set by {cfg.values['node_type'].origin}); types found: {found}")
    if cfg.node_count is None:
        cfg.set("node_count", len(chosen), Source.DISCOVERED, f"Ready {cfg.node_type} nodes")
    elif cfg.node_count > len(chosen):
        raise ConfigError(f"discover nodes: NODE_COUNT={cfg.node_count} but only {len(chosen)} Ready "
                          f"{cfg.node_type} nodes: {_describe(chosen)}")
    return chosen


def _gpu_capacity_condition(cfg: Config, wanted_per_node: int) -> Condition:
    """Enough nodes of the type advertise at least `wanted_per_node` GPUs."""

    def check(state: ClusterState, _now: float) -> str | None:
        infos = [NodeInfo.from_node(n) for n in state.of_kind("Node")]
        good = [n for n in infos if n.ready and n.instance_type == cfg.node_type and n.gpus >= wanted_per_node]
        return f"{len(good)} nodes advertise GPUs" if len(good) >= cfg.node_count else None

    return Condition(f"{cfg.node_count} {cfg.node_type} nodes to advertise >= {wanted_per_node} "
                     f"{GPU_RESOURCE}", (Watched(NODE),), check)


def discover(cluster: Cluster, cfg: Config, cancel: CancelToken) -> list[NodeInfo]:
    """Fill node_type, node_count, gpus_per_node, efa_per_node; return the nodes to use."""
    nodes = [NodeInfo.from_node(n) for n in cluster.list(NODE).get("items", [])]
    chosen = select_nodes(nodes, cfg)
    if cfg.accelerator == "cpu":
        if cfg.gpus_per_node is None:
            cfg.set("gpus_per_node", 1, Source.DERIVED, "one process per node with ACCELERATOR=cpu")
    else:
        wanted = cfg.gpus_per_node or 1
        if sum(1 for n in chosen if n.gpus >= wanted) < cfg.node_count:
            try:
                wait_for(cluster, _gpu_capacity_condition(cfg, wanted), timeout=cfg.discovery_timeout,
                         cancel=cancel)
            except WaitTimeout:
                latest = [NodeInfo.from_node(n) for n in cluster.list(NODE).get("items", [])]
                raise ConfigError(
                    f"discover GPUs: fewer than {cfg.node_count} {cfg.node_type} nodes advertise "
                    f">= {wanted} {GPU_RESOURCE} after {format_duration(cfg.discovery_timeout)} "
                    f"(nodes: {_describe(latest)}); is the NVIDIA device plugin running? "
                    "For a CPU-only cluster set ACCELERATOR=cpu") from None
            except Interrupted as exc:
                raise ConfigError(f"discover GPUs: {exc}") from None
            nodes = [NodeInfo.from_node(n) for n in cluster.list(NODE).get("items", [])]
            chosen = select_nodes(nodes, cfg)
        chosen = [n for n in chosen if n.gpus >= wanted]
        if cfg.gpus_per_node is None:
            cfg.set("gpus_per_node", min(n.gpus for n in chosen[: cfg.node_count]), Source.DISCOVERED,
                    f"{GPU_RESOURCE} capacity")
    chosen = chosen[: cfg.node_count]
    _resolve_efa(cfg, chosen)
    return chosen


def _resolve_efa(cfg: Config, chosen: list[NodeInfo]) -> None:
    advertised = min(n.efa for n in chosen)
    if cfg.efa_enabled is False:
        cfg.set("efa_per_node", 0, Source.FLAG, "--efaEnabled=false")
    elif cfg.efa_per_node is not None:
        if cfg.efa_per_node > advertised:
            raise ConfigError(f"discover EFA: EFA_PER_NODE={cfg.efa_per_node} but the {cfg.node_type} "
                              f"nodes advertise {advertised} {EFA_RESOURCE}")
    else:
        if cfg.efa_enabled and advertised == 0:
            raise ConfigError(f"discover EFA: --efaEnabled=true but no {cfg.node_type} node advertises "
                              f"{EFA_RESOURCE}")
        cfg.set("efa_per_node", advertised, Source.DISCOVERED, f"{EFA_RESOURCE} capacity")
