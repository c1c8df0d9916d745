"""What discovery found: the node type, the nodes to use, GPUs and EFA per node, and where each
value came from (a setting the user gave, or the nodes' labels and allocatable resources).

A node's GPUs and EFA devices are its `status.allocatable`, what pods can be given: a GPU the
device plugin marked unhealthy stays in `status.capacity` but leaves allocatable, so counting
capacity would pass a node that cannot run the job. Capacity is kept to say both in a failure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.config.settings import SETTINGS_BY_NAME, Origin, Resolved, Source

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# kwok's mark of a node it plays (kwok manages the nodes annotated so; the local cluster's are): the
# node's capacity and allocatable are what made the node wrote (the local cluster's node shapes, its
# GPU-sharing emulation), with no kubelet or device plugin counting devices behind them.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Taints GPU and EFA nodes carry (EKS GPU node groups and Karpenter GPU NodePools taint
# nvidia.com/gpu, EFA node groups vpc.amazonaws.com/efa, with NoSchedule or NoExecute): every pod of
# the suite tolerates them with any value and effect, or a tainted node leaves training pods Pending
# and a DaemonSet without pods. Not aws.amazon.com/neuron: the suite selects NVIDIA nodes (or CPU
# ones) only, never a Neuron node; TOLERATIONS adds it or any other.
DEFAULT_TOLERATIONS: tuple[dict[str, str], ...] = ({"key": GPU_RESOURCE, "operator": "Exists"},
                                                   {"key": EFA_RESOURCE, "operator": "Exists"})


# Taints that keep pods off a node (PreferNoSchedule only discourages: the local cluster's kwok
# stand-ins carry one beside real nodes, and pods still run there when they must).
KEEPING_OFF_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# Taints that only repeat a state named already (NotReady, cordoned): not listed twice.
STATE_TAINTS = {"node.kubernetes.io/not-ready": "NotReady", "node.kubernetes.io/unreachable": "NotReady",
                "node.kubernetes.io/unschedulable": "cordoned (spec.unschedulable)"}


def tolerates(tolerations: Sequence[Mapping[str, str]], key: str, value: str, effect: str) -> bool:
    """Whether a pod with `tolerations` tolerates the taint (the scheduler's matching rules)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != effect:
            continue
        if toleration.get("key") and toleration["key"] != key:
            continue
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            continue  # an empty key matches every taint only with Exists
        if toleration.get("operator", "Equal") == "Exists" or toleration.get("value", "") == value:
            return True
    return False


def _quantity(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


_QUANTITY = re.compile(r"(?P<number>[0-9.]+(?:[eE][+-]?[0-9]+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_SUFFIXES = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value: str | None) -> float:
    """A Kubernetes resource quantity (`95690m`, `2Gi`, `1998036224Ki`, `1e9`) as a number; 0 when absent
    or malformed (a node that says nothing usable offers nothing)."""
    match = _QUANTITY.fullmatch(str(value or "").strip())
    if match is None:
        return 0.0
    if match["suffix"] == "m":
        return float(match["number"]) / 1000  # divided: 191450m is 191.45 exactly as a float prints it
    return float(match["number"]) * _SUFFIXES.get(match["suffix"] or "", 1)


@dataclass(frozen=True)
class NodeInfo:
    """A node as discovery sees it: its type, allocatable GPUs and EFA devices (capacity beside,
    None when it is the same), and whether pods can run there."""

    name: str
    instance_type: str
    gpus: int  # allocatable nvidia.com/gpu
    efa: int  # allocatable vpc.amazonaws.com/efa
    ready: bool
    # CPUs (ids 0..cpus-1: capacity), and what pods may request (allocatable): GPU pods' requests.
    cpus: int = 0
    allocatable_cpu: float = 0.0
    allocatable_memory: float = 0.0  # bytes
    gpus_capacity: int | None = None  # status.capacity, when it differs from allocatable
    efa_capacity: int | None = None
    # Why `ready` is False, apart: the Ready condition, and spec.unschedulable (cordoned).
    condition_ready: bool | None = None  # None: as `ready` says
    cordoned: bool = False
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect) of spec.taints
    # Its capacity is emulated (KWOK_NODE_ANNOTATION): what is judged on it was written, not counted.
    emulated: bool = False

    def problems(self, tolerations: Sequence[Mapping[str, str]]) -> list[str]:
        """Why the run's pods cannot use this node fully: NotReady, cordoned, a taint they do not
        tolerate, fewer GPUs or EFA devices allocatable than capacity; [] for a healthy node."""
        found = []
        # Built without the condition (tests): not ready and not cordoned can only be NotReady.
        kubelet_ready = self.ready or self.cordoned if self.condition_ready is None else self.condition_ready
        if not kubelet_ready:
            found.append("NotReady")
        if self.cordoned:
            found.append("cordoned (spec.unschedulable)")
        for key, value, effect in self.taints:
            if effect not in KEEPING_OFF_EFFECTS or STATE_TAINTS.get(key) in found:
                continue
            if not tolerates(tolerations, key, value, effect):
                found.append(f"taint {key}{'=' + value if value else ''}:{effect} not tolerated")
        for resource in (GPU_RESOURCE, EFA_RESOURCE):
            if self.capacity_of(resource) > self.allocatable_of(resource):
                found.append(f"{self.allocatable_of(resource)} of {self.capacity_of(resource)} {resource} allocatable")
        return found

    def capacity_of(self, resource: str) -> int:
        """The node's status.capacity of GPUs or EFA devices."""
        if resource == GPU_RESOURCE:
            return self.gpus if self.gpus_capacity is None else self.gpus_capacity
        return self.efa if self.efa_capacity is None else self.efa_capacity

    def allocatable_of(self, resource: str) -> int:
        return self.gpus if resource == GPU_RESOURCE else self.efa

    def describe(self, resource: str) -> str:
        """`8 allocatable nvidia.com/gpu`, or `7 allocatable nvidia.com/gpu (capacity 8)` when they differ."""
        allocatable, capacity = self.allocatable_of(resource), self.capacity_of(resource)
        differs = f" (capacity {capacity})" if capacity != allocatable else ""
        return f"{allocatable} allocatable {resource}{differs}"

    @classmethod
    def from_node(cls, node: dict[str, Any]) -> NodeInfo:  # a Node as the API returns it
        capacity = node.get("status", {}).get("capacity") or {}
        # A node whose kubelet has not reported allocatable yet has none: read capacity then.
        allocatable = node.get("status", {}).get("allocatable")
        allocatable = capacity if allocatable is None else allocatable
        gpus, efa = _quantity(allocatable.get(GPU_RESOURCE)), _quantity(allocatable.get(EFA_RESOURCE))
        gpus_capacity, efa_capacity = _quantity(capacity.get(GPU_RESOURCE)), _quantity(capacity.get(EFA_RESOURCE))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in node.get("status", {}).get("conditions") or [])
        schedulable = not node.get("spec", {}).get("unschedulable", False)
        return cls(
            name=node["metadata"]["name"],
            instance_type=(node["metadata"].get("labels") or {}).get(INSTANCE_TYPE_LABEL, "<unlabelled>"),
            gpus=gpus,
            efa=efa,
            ready=ready and schedulable,
            cpus=int(quantity(capacity.get("cpu"))),
            allocatable_cpu=quantity((node.get("status", {}).get("allocatable") or {}).get("cpu")),
            allocatable_memory=quantity((node.get("status", {}).get("allocatable") or {}).get("memory")),
            gpus_capacity=None if gpus_capacity == gpus else gpus_capacity,
            efa_capacity=None if efa_capacity == efa else efa_capacity,
            condition_ready=ready,
            cordoned=not schedulable,
            taints=tuple((str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                         for t in node.get("spec", {}).get("taints") or []),
            emulated=KWOK_NODE_ANNOTATION in (node["metadata"].get("annotations") or {}),
        )


# Nodes named in a message; the rest are counted (a 1,000-node cluster made 60 KB messages).
NODES_DESCRIBED = 10


def describe_nodes(nodes: list[NodeInfo]) -> str:
    shown = ", ".join(f"{n.name} ({n.instance_type}, {n.describe(GPU_RESOURCE)}, {'Ready' if n.ready else 'NotReady'})"
                      for n in nodes[:NODES_DESCRIBED])
    more = f" and {len(nodes) - NODES_DESCRIBED} more" if len(nodes) > NODES_DESCRIBED else ""
    return shown + more or "none"


@dataclass(frozen=True)
class Topology:
    """The nodes a run uses and what each offers: every job is rendered on this.

    `gpus_per_node` is the processes per node (1 on ACCELERATOR=cpu); `origins` says where
    node_type, node_count, gpus_per_node and efa_per_node came from.
    """

    node_type: str
    nodes: tuple[NodeInfo, ...]
    gpus_per_node: int
    efa_per_node: int
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False)
    # Every node of the type, whatever its state, with why the run's pods cannot use it fully
    # (NodeInfo.problems; empty: healthy): the `nodes` check and config.nodes_of_type read it.
    nodes_of_type: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    # The nodes of the type whose capacity is emulated (NodeInfo.emulated): the checks judged on
    # what nodes advertise say so (harness.verdict.capacity.mark_emulated).
    emulated: tuple[str, ...] = field(default=(), compare=False)

    @property
    def user_set_count(self) -> bool:
        """Whether NODE_COUNT (flag or env) chose the node count rather than discovery."""
        origin = self.origins.get("node_count")
        return origin is not None and origin.source in (Source.FLAG, Source.ENV)

    def states_text(self) -> str:
        """`a=Ready, b=NotReady; cordoned (spec.unschedulable)`: each node of the type and its state."""
        return ", ".join(f"{name}={'; '.join(problems) or 'Ready'}" for name, problems in self.nodes_of_type)

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def resolved(self) -> dict[str, Resolved]:
        """The discovered values as shown with the configuration (same names as the settings)."""
        values = {"node_type": self.node_type, "node_count": self.node_count,
                  "gpus_per_node": self.gpus_per_node, "efa_per_node": self.efa_per_node}
        shown = {name: Resolved(value, self.origins[name], SETTINGS_BY_NAME[name]) for name, value in values.items()}
        if self.nodes_of_type:
            shown["nodes_of_type"] = Resolved(self.states_text(), Origin(
                Source.DISCOVERED, f"every {INSTANCE_TYPE_LABEL}={self.node_type} node, whatever its state"))
        if self.emulated:
            shown["nodes_emulated"] = Resolved(", ".join(self.emulated), Origin(
                Source.DISCOVERED, f"{KWOK_NODE_ANNOTATION} annotation: kwok plays them, their capacity is written, "
                                   "not counted by a device plugin"))
        return shown
