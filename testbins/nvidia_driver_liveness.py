"""e2e-nvidia-driver-liveness (also installed as nvidia-driver-liveness.test, upstream's name): upstream
aws-k8s-tester's test/cases/nvidia-driver-liveness suite under its test, feature and assessment names
(TestDriverLiveness; testbins/nvidia_node/driver_liveness.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import driver_liveness

SUITE = Suite("e2e-nvidia-driver-liveness", (
    "Upstream aws-k8s-tester's nvidia-driver-liveness suite: the NVIDIA driver answers and is the one "
    "expected: nvidia-smi runs, every GPU reports the --expectedDriverVersion branch and the instance "
    "type's GPU model."
    ), aliases=("nvidia-driver-liveness.test",))
SUITE.test("TestDriverLiveness", upstream=True, feature="nvidia-driver-liveness",
           launches="`manifests/scripts/driver-liveness-check.sh` in `--nvidiaTestImage`, one pod with one GPU",
           checks=(driver_liveness.DRIVER_LIVENESS.kind,),
           settings=("NCCL_TESTS_IMAGE", "EXPECTED_DRIVER_VERSION", "NODE_TYPE"),
           labels=GPU,
           assessments=("pod reaches Succeeded",))(
    driver_liveness.test_driver_liveness)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
