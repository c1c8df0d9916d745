"""A stand-in for the DRA drivers of upstream's nvidia-dra suite on kwok GPU nodes: no driver runs
here (no GPU, no EFA, no kubelet plugin), so the local cluster publishes, as each would, the
ResourceSlices of NVIDIA's DRA driver (driver gpu.nvidia.com: the node's GPUs) and of dranet (driver
dra.net: its EFA interfaces), and the DeviceClasses the chart and upstream's dranet manifest make
(manifests/dra-device-classes.yaml). The real kube-scheduler then allocates ResourceClaims against
them and the real resourceclaim controller makes claims from templates; nothing prepares the
devices in a container (kwok runs no container). Every object says it is a stand-in
(STAND_IN_ANNOTATION), and each slice is owned by its Node, so it goes with it.

Devices and attributes are those upstream's ResourceClaimTemplates select: GPUs of type `gpu`, EFAs
whose `dra.net/pciDevice` is `Elastic Fabric Adapter (EFA)`, and on both the PCIe root
(`resource.kubernetes.io/pcieRoot`) they hang off: p5.48xlarge has 4 EFAs on each GPU's root, so a
claim of 5 EFAs and 1 GPU on one root (upstream's negative test case) cannot be allocated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from localcluster.base.annotations import ANNOTATION_PREFIX
from localcluster.control.api import ApiClient


class NodeShape(Protocol):
    """What of a node shape (localcluster/emulation/nodes.py, which calls this module) the drivers see."""

    instance_type: str
    gpus: int
    max_efa: int

STAND_IN_ANNOTATION = ANNOTATION_PREFIX + "stand-in"
GPU_DRIVER, RDMA_DRIVER = "gpu.nvidia.com", "dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
# What each GPU shape's GPUs are, as NVIDIA's driver would describe them.
GPU_MODELS = {"p5.48xlarge": ("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi"),
              "p4d.24xlarge": ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", "40Gi"),
              "p3.16xlarge": ("Tesla V100-SXM2-16GB", "Volta", "7.0.0", "16Gi")}
DRIVER_VERSION = "580.65.6"  # the canned logs' driver (580.65.06), as a semantic version
DEVICE_CLASSES = Path(__file__).resolve().parents[2] / "manifests" / "dra-device-classes.yaml"
STANDS_IN_FOR = {
    GPU_DRIVER: "NVIDIA's DRA driver (chart nvidia-dra-driver-gpu 25.8.1, kubelet plugin): published by the local "
                "cluster (localcluster/emulation/dra.py); no driver runs here",
    RDMA_DRIVER: "dranet, the RDMA DRA driver: published by the local cluster (localcluster/emulation/dra.py); no "
                 "driver runs here",
}


def attribute(value: str | int | bool, kind: str = "string") -> dict[str, Any]:
    return {kind: value}


def pcie_root(index: int) -> str:
    return f"pci0000:{0x10 * (index + 1):02x}"


def gpu_devices(shape: NodeShape) -> list[dict[str, Any]]:
    product, architecture, compute, memory = GPU_MODELS.get(shape.instance_type, GPU_MODELS["p5.48xlarge"])
    return [{"name": f"gpu-{g}",
             "attributes": {"type": attribute("gpu"), "uuid": attribute(f"GPU-{g:08x}-1111-2222-3333-444455556666"),
                            "productName": attribute(product), "brand": attribute("Nvidia"),
                            "architecture": attribute(architecture),
                            "cudaComputeCapability": attribute(compute, "version"),
                            "driverVersion": attribute(DRIVER_VERSION, "version"),
                            "index": attribute(g, "int"), "pcieBusID": attribute(f"0000:{0x10 * (g + 1):02x}:00.0"),
                            PCIE_ROOT: attribute(pcie_root(g))},
             "capacity": {"memory": {"value": memory}}} for g in range(shape.gpus)]


def efa_devices(shape: NodeShape) -> list[dict[str, Any]]:
    """The node's EFA interfaces, spread evenly over its GPUs' PCIe roots (p5: 4 on each of 8)."""
    return [{"name": f"rdmap{e}s0",
             "attributes": {"dra.net/pciDevice": attribute(EFA_PCI_DEVICE),
                            "dra.net/pciVendor": attribute("Amazon.com, Inc."),
                            "dra.net/rdma": attribute(True, "bool"), "dra.net/ifName": attribute(f"rdmap{e}s0"),
                            PCIE_ROOT: attribute(pcie_root(e * shape.gpus // shape.max_efa))}}
            for e in range(shape.max_efa)]


def resource_slice(node: dict[str, Any], driver: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{driver}", "annotations": {STAND_IN_ANNOTATION: STANDS_IN_FOR[driver]},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                              "uid": node["metadata"]["uid"]}]},
            "spec": {"driver": driver, "nodeName": name, "pool": {"name": name, "generation": 1,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


def device_classes() -> list[dict[str, Any]]:
    """manifests/dra-device-classes.yaml, its labels this stand-in's."""
    import yaml

    text = DEVICE_CLASSES.read_text().replace("{{.Labels}}", json.dumps({"app.kubernetes.io/managed-by":
                                                                         "kubetest2-training-local-cluster"}))
    classes = [doc for doc in yaml.safe_load_all(text) if doc]
    for obj in classes:
        obj["metadata"]["annotations"] = {STAND_IN_ANNOTATION: "the DeviceClass NVIDIA's chart (gpu.nvidia.com) or "
                                          "upstream's dranet manifest (efa.networking.k8s.aws) makes, made by the "
                                          "local cluster's DRA stand-in (localcluster/emulation/dra.py)"}
    return classes


def publish_classes(api: ApiClient, shape: NodeShape) -> None:
    """The DeviceClasses, where the nodes have GPUs."""
    if shape.gpus:
        for obj in device_classes():
            api.apply(obj)


def publish(api: ApiClient, shape: NodeShape, name: str) -> None:
    """A GPU node's ResourceSlices: its GPUs as NVIDIA's driver's, its EFAs as dranet's."""
    if not shape.gpus:
        return
    node = api.get("Node", name)
    api.apply(resource_slice(node, GPU_DRIVER, gpu_devices(shape)))
    if shape.max_efa:
        api.apply(resource_slice(node, RDMA_DRIVER, efa_devices(shape)))


def unpublish(api: ApiClient, name: str) -> None:
    for driver in STANDS_IN_FOR:
        api.delete("ResourceSlice", f"{name}-{driver}")
