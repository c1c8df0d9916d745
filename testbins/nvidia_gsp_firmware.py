"""e2e-nvidia-gsp-firmware (also installed as nvidia-gsp-firmware.test, upstream's name): upstream
aws-k8s-tester's test/cases/nvidia-gsp-firmware suite under its test, feature and assessment names
(TestGSPFirmware; testbins/nvidia_node/gsp_firmware.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import gsp_firmware

SUITE = Suite("e2e-nvidia-gsp-firmware", (
    "Upstream aws-k8s-tester's nvidia-gsp-firmware suite: the GPU System Processor firmware is loaded, of"
    " the driver's version, on every GPU."
    ), aliases=("nvidia-gsp-firmware.test",))
SUITE.test("TestGSPFirmware", upstream=True, feature="nvidia-gsp-firmware",
           launches="`manifests/scripts/gsp-firmware-check.sh` in `--nvidiaTestImage`, one pod with every GPU of its "
           "node (host /proc read-only)",
           checks=(gsp_firmware.GSP_FIRMWARE.kind,),
           settings=("NCCL_TESTS_IMAGE",),
           labels=GPU,
           assessments=("pod reaches Succeeded",))(
    gsp_firmware.test_gsp_firmware)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
