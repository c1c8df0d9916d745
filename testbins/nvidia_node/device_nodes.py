"""TestDeviceNodes (upstream's test/cases/nvidia-persistence-device-nodes)."""

from __future__ import annotations

from harness.framework.context import TestContext
from testbins.nvidia_node.common import NodeCheck, run_check

DEVICE_NODES = NodeCheck("device_nodes", "nvidia-persistence-device-nodes-check", "device-nodes-check.sh",
                         "=== all expected /dev/nvidia* device nodes present ===")


def test_device_nodes(t: TestContext) -> None:
    """One pod with a GPU: /dev/nvidia<N>, nvidiactl, nvidia-uvm and nvidia-uvm-tools are character
    devices owned by root."""
    run_check(t, DEVICE_NODES, "pod reaches Succeeded", nodes=1, gpus=1)
