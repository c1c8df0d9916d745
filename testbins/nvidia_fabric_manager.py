"""e2e-nvidia-fabric-manager (also installed as nvidia-fabric-manager.test, upstream's name): upstream
aws-k8s-tester's test/cases/nvidia-fabric-manager suite under its test, feature and assessment names
(TestFabricManagerVersionMatchesDriver, TestFabricAndNVLinkInContainer;
testbins/nvidia_node/fabric_manager.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import fabric_manager

SUITE = Suite("e2e-nvidia-fabric-manager", (
    "Upstream aws-k8s-tester's nvidia-fabric-manager suite: the NVSwitch fabric is healthy: the fabric "
    "manager runs the driver's version on every GPU node, the fabric state is Completed and every NVLink "
    "is up."
    ), aliases=("nvidia-fabric-manager.test",))
SUITE.test("TestFabricManagerVersionMatchesDriver", upstream=True, feature="nvidia-fabric-manager-version-check",
           launches="`manifests/scripts/fabric-manager-version-check.sh` in `--nvidiaTestImage`, a pod on every node "
           "(host /proc and /var/log read-only)",
           checks=(fabric_manager.FABRIC_MANAGER_VERSION.kind,),
           settings=("NCCL_TESTS_IMAGE",),
           labels=GPU,
           assessments=("Job pods all succeed",))(
    fabric_manager.test_fabric_manager_version)
SUITE.test("TestFabricAndNVLinkInContainer", upstream=True, feature="nvidia-fabric-nvlink-check",
           launches="`manifests/scripts/fabric-nvlink-check.sh` in `--nvidiaTestImage`, one pod with every GPU of its "
           "node (host /proc/driver and journals read-only)",
           checks=(fabric_manager.FABRIC_NVLINK.kind,),
           settings=("NCCL_TESTS_IMAGE",),
           labels=GPU,
           assessments=("pod reaches Succeeded",))(
    fabric_manager.test_fabric_and_nvlink)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
