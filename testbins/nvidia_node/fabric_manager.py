"""TestFabricManagerVersionMatchesDriver and TestFabricAndNVLinkInContainer (upstream's
test/cases/nvidia-fabric-manager)."""

from __future__ import annotations

from harness.framework.context import TestContext
from testbins.nvidia_node.common import HOST_PROC, NodeCheck, run_check

FABRIC_MANAGER_VERSION = NodeCheck(
    "fabric_manager_version", "nvidia-fabric-manager-version-check", "fabric-manager-version-check.sh",
    "=== all fabric-manager version checks passed ===", host_paths={**HOST_PROC, "/host/var/log": "/var/log"})
FABRIC_NVLINK = NodeCheck(
    "fabric_nvlink", "nvidia-fabric-nvlink-check", "fabric-nvlink-check.sh",
    "=== all applicable fabric/NVLink checks passed ===",
    host_paths={"/host/proc/driver": "/proc/driver", "/host/var/log/journal": "/var/log/journal",
                "/host/run/log/journal": "/run/log/journal"})


def test_fabric_manager_version(t: TestContext) -> None:
    """A pod on every GPU node of the type: where NVSwitches are bound, the fabric manager's version
    (its log) is the kernel driver's."""
    run_check(t, FABRIC_MANAGER_VERSION, "Job pods all succeed", gpus=0)


def test_fabric_and_nvlink(t: TestContext) -> None:
    """One pod with every GPU of its node: NVSwitch nodes' fabric state Completed and every NVLink up,
    as many as the GPU model has; a node without NVLink lists none."""
    run_check(t, FABRIC_NVLINK, "pod reaches Succeeded", nodes=1)
