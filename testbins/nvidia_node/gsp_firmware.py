"""TestGSPFirmware (upstream's test/cases/nvidia-gsp-firmware)."""

from __future__ import annotations

from harness.framework.context import TestContext
from testbins.nvidia_node.common import HOST_PROC, NodeCheck, run_check

GSP_FIRMWARE = NodeCheck("gsp_firmware", "nvidia-gsp-firmware-check", "gsp-firmware-check.sh",
                         "=== all GSP firmware checks passed ===", host_paths=HOST_PROC)


def test_gsp_firmware(t: TestContext) -> None:
    """One pod with every GPU of its node: on Ampere and later, with GSP enabled in the driver, every
    GPU runs GSP firmware of the driver's version, the same on all of them."""
    run_check(t, GSP_FIRMWARE, "pod reaches Succeeded", nodes=1)
