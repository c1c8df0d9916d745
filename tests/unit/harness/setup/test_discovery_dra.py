"""A DRA suite's discovery (nvidia-dra: Suite.devices_by_dra): its GPUs are a DRA driver's devices,
no node resource, so it neither waits for nodes to advertise nvidia.com/gpu nor installs NVIDIA's
device plugin; the GPUs per node come from GPUS_PER_NODE, else the node type's table."""

from __future__ import annotations

import threading

from harness.config.settings import resolve
from harness.setup import discovery
from testbins.nvidia_dra import SUITE


def p5_node(name: str, gpus: int = 0) -> dict:
    allocatable = {"cpu": "192", "memory": "2000Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "spec": {}, "status": {"allocatable": allocatable, "capacity": allocatable,
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


class Cluster:
    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = nodes

    def list(self, resource, namespace=None, label_selector=None, field_selector=None):
        return {"items": self.nodes, "metadata": {"resourceVersion": "1"}}


def test_the_dra_suite_is_declared_so():
    assert SUITE.devices_by_dra


def test_dra_nodes_that_advertise_no_gpu_are_used_with_the_types_gpus(monkeypatch):
    cluster = Cluster([p5_node("n0"), p5_node("n1")])
    monkeypatch.setattr(discovery, "list_nodes", lambda c: [discovery.NodeInfo.from_node(n) for n in c.nodes])
    cfg = resolve({}, {"ACCELERATOR": "nvidia", "NODE_TYPE": "p5.48xlarge", "DISCOVERY_TIMEOUT": "1s"})
    topology = discovery.discover(cluster, cfg, threading.Event(), advertised=False)
    assert topology.node_names == ("n0", "n1") and topology.gpus_per_node == 8
    assert "GPUs through DRA" in topology.origins["gpus_per_node"].detail
