"""Fake nodes played by kwok: shapes (CPU, GPU), creation, replacement, and NotReady or slow on demand."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from localcluster.base.settings import LOOPBACK
from localcluster.control.api import ApiClient
from localcluster.control.components import KWOK_NODE_LABEL, KWOK_NODE_LABEL_VALUE
from localcluster.emulation import dra

MANAGED_LABEL = "kubetest2-training.local/node"
# Label that the kwok stage in kwok_stages.yaml turns into Ready=False (and back when removed).
NOT_READY_LABEL = "kubetest2-training.local/not-ready"
# Label that makes the node agent stop the node's pods' processes that fraction of every period
# (slow_nodes.py): a node that is really slower, for straggler tests.
SLOW_LABEL = "kubetest2-training.local/slow"
# Label that gives the node's pods that many of the machine's cores (node_cpus.py).
CPUS_LABEL = "kubetest2-training.local/cpus"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Nodes created at once: a thousand nodes one request at a time took about 3 minutes.
CREATE_WORKERS = 8
NODE_LEASE_NAMESPACE = "kube-node-lease"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


@dataclass(frozen=True)
class NodeShape:
    """What a node looks like to the scheduler and to node discovery."""

    name: str
    instance_type: str
    cpu: str
    memory: str
    gpus: int
    max_efa: int

    def capacity(self, efa: int) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110", "ephemeral-storage": "500Gi"}
        if self.gpus:
            capacity[GPU_RESOURCE] = str(self.gpus)
        if efa:
            capacity[EFA_RESOURCE] = str(efa)
        return capacity


SHAPES: dict[str, NodeShape] = {
    "cpu": NodeShape("cpu", "kwok-cpu", cpu="16", memory="64Gi", gpus=0, max_efa=0),
    # p4d.24xlarge: 8 A100, 96 vCPUs, 1152 GiB, 4 EFA interfaces.
    "gpu": NodeShape("gpu", "p4d.24xlarge", cpu="96", memory="1152Gi", gpus=8, max_efa=4),
    # The instance types of upstream's CI lines, so they run here verbatim: p5.48xlarge (8 H100,
    # 192 vCPUs, 2048 GiB, 32 EFA interfaces) and p3.16xlarge (8 V100, 64 vCPUs, 488 GiB, no EFA).
    "p5": NodeShape("p5", "p5.48xlarge", cpu="192", memory="2048Gi", gpus=8, max_efa=32),
    "p3": NodeShape("p3", "p3.16xlarge", cpu="64", memory="488Gi", gpus=8, max_efa=0),
}


def node_name(shape: NodeShape, index: int) -> str:
    return f"kwok-{shape.name}-{index}"


def node_manifest(shape: NodeShape, index: int, efa: int) -> dict[str, Any]:
    """A Node whose status kwok completes (conditions, nodeInfo) once it sees the kwok label."""
    name = node_name(shape, index)
    capacity = shape.capacity(efa)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
                MANAGED_LABEL: shape.name,
                INSTANCE_TYPE_LABEL: shape.instance_type,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        # Status is kept on create for nodes; kwok then fills in the rest. InternalIP 127.0.0.1
        # keeps the API server's pods/log proxying on loopback (kwok serves the logs there).
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": name}],
        },
    }


def managed_nodes(api: ApiClient) -> list[dict[str, Any]]:
    return list(api.get("Node", labelSelector=MANAGED_LABEL)["items"])


def replace_nodes(api: ApiClient, shape_name: str, count: int, efa: int) -> list[str]:
    """Deletes the nodes this package made and creates `count` nodes of the shape; returns names.

    Pods bound to a deleted node are removed by the pod garbage collector, like on a real cluster.
    """
    shape = SHAPES.get(shape_name)
    if shape is None:
        raise SystemExit(f"local-cluster: unknown node shape {shape_name!r}; expected one of {sorted(SHAPES)}")
    if efa > shape.max_efa:
        raise SystemExit(f"local-cluster: shape {shape_name} has at most {shape.max_efa} EFA devices, "
                         f"asked for {efa}")
    if count < 1:
        raise SystemExit(f"local-cluster: node count must be at least 1, got {count}")
    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        list(pool.map(lambda node: delete_node(api, node["metadata"]["name"]), managed_nodes(api)))
        created = list(pool.map(lambda index: create_node(api, node_manifest(shape, index, efa)), range(count)))
        # The DRA drivers' devices on GPU nodes, as they would publish them (a stand-in: see dra.py).
        dra.publish_classes(api, shape)
        list(pool.map(lambda name: dra.publish(api, shape, name), created))
    return created


def delete_node(api: ApiClient, name: str) -> None:
    """Deletes a node and its lease: kwok kept renewing a lease it remembered from a deleted node of
    the same name (a conflict on every try) and a thousand re-created nodes stayed NotReady."""
    api.delete("Node", name)
    api.delete("Lease", name, NODE_LEASE_NAMESPACE)
    dra.unpublish(api, name)  # its owner reference would remove them too, but not before a new node of its name


def create_node(api: ApiClient, manifest: dict[str, Any]) -> str:
    """Creates (or updates) one node with its capacity; returns its name."""
    # A node of the same name may still be finishing its deletion; apply either way.
    api.apply(manifest)
    api.merge_patch("Node", manifest["metadata"]["name"], {"status": manifest["status"]}, subresource="status")
    return str(manifest["metadata"]["name"])


def set_not_ready(api: ApiClient, name: str, not_ready: bool) -> None:
    """Labels the node so that kwok reports it NotReady; removing the label makes it Ready again."""
    api.merge_patch("Node", name, {"metadata": {"labels": {NOT_READY_LABEL: "true" if not_ready else None}}})


def node_is_ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# Taints the node lifecycle controller puts on a node that is (or was) NotReady; it removes them a
# moment after the node is Ready again, and until then the scheduler refuses the node.
READINESS_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def node_accepts_pods(node: dict[str, Any]) -> bool:
    """Ready, and no readiness taint left: what a test that schedules pods next needs."""
    taints = node.get("spec", {}).get("taints") or []
    return node_is_ready(node) and not any(t.get("key") in READINESS_TAINTS for t in taints)


def parse_slow_fraction(text: str) -> float:
    """The value of the slow label: a fraction strictly between 0 and 1 (of each period stopped)."""
    try:
        fraction = float(text)
    except ValueError:
        fraction = float("nan")
    if not 0 < fraction < 1:  # also false for NaN
        raise ValueError(f"{SLOW_LABEL}: {text!r} is not a fraction strictly between 0 and 1 "
                         "(the share of each period the node's pods are stopped, e.g. 0.5 halves their speed)")
    return fraction


def slow_fraction(node: dict[str, Any]) -> float | None:
    """The node's slow fraction; None when it has no slow label. ValueError for a malformed one."""
    value = (node["metadata"].get("labels") or {}).get(SLOW_LABEL)
    return None if value is None else parse_slow_fraction(value)


def node_cpus(node: dict[str, Any]) -> str | None:
    """The node's cpus label as written; None when it has none."""
    return (node["metadata"].get("labels") or {}).get(CPUS_LABEL)


def set_cpus(api: ApiClient, name: str, cores: float | None) -> None:
    """Labels the node with its own `cores`; None removes the label (the machine's CPUs again)."""
    value = None if cores is None else str(cores)  # str: round-trips exactly, as set_slow's
    api.merge_patch("Node", name, {"metadata": {"labels": {CPUS_LABEL: value}}})


def set_slow(api: ApiClient, name: str, fraction: float | None) -> None:
    """Labels the node slow by `fraction`; None removes the label (full speed again)."""
    value = None if fraction is None else str(fraction)  # str: round-trips exactly
    api.merge_patch("Node", name, {"metadata": {"labels": {SLOW_LABEL: value}}})
