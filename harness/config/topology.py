"""What discovery found: the node type, the nodes to use, GPUs and EFA per node, and where each
value came from (a setting the user gave, or the nodes' labels and allocatable resources).

A node's GPUs and EFA devices are its `status.allocatable`, what pods can be given: a GPU the
device plugin marked unhealthy stays in `status.capacity` but leaves allocatable, so counting
capacity would pass a node that cannot run the job. Capacity is kept to say both in a failure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.settings import SETTINGS_BY_NAME, Origin, Resolved

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Taints GPU and EFA nodes carry (EKS GPU node groups and Karpenter GPU NodePools taint
# nvidia.com/gpu, EFA node groups vpc.amazonaws.com/efa, with NoSchedule or NoExecute): every pod of
# the suite tolerates them with any value and effect, or a tainted node leaves training pods Pending
# and a DaemonSet without pods. Not aws.amazon.com/neuron: the suite selects NVIDIA nodes (or CPU
# ones) only, never a Neuron node; TOLERATIONS adds it or any other.
DEFAULT_TOLERATIONS: tuple[dict[str, str], ...] = ({"key": GPU_RESOURCE, "operator": "Exists"},
                                                   {"key": EFA_RESOURCE, "operator": "Exists"})


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
        return {name: Resolved(value, self.origins[name], SETTINGS_BY_NAME[name]) for name, value in values.items()}
