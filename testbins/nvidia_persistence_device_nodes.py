"""e2e-nvidia-persistence-device-nodes (also installed as nvidia-persistence-device-nodes.test, upstream's name):
upstream aws-k8s-tester's test/cases/nvidia-persistence-device-nodes suite under its test, feature and
assessment names (TestDeviceNodes; testbins/nvidia_node/device_nodes.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import device_nodes

SUITE = Suite("e2e-nvidia-persistence-device-nodes", (
    "Upstream aws-k8s-tester's nvidia-persistence-device-nodes suite: a GPU container has the "
    "/dev/nvidia* device nodes it needs, character devices owned by root."
    ), aliases=("nvidia-persistence-device-nodes.test",))
SUITE.test("TestDeviceNodes", upstream=True, feature="nvidia-persistence-device-nodes",
           launches="`manifests/scripts/device-nodes-check.sh` in `--nvidiaTestImage`, one pod with one GPU",
           checks=(device_nodes.DEVICE_NODES.kind,),
           settings=("NCCL_TESTS_IMAGE",),
           labels=GPU,
           assessments=("pod reaches Succeeded",))(
    device_nodes.test_device_nodes)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
