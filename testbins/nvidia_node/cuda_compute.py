"""TestCUDACompute (upstream's test/cases/nvidia-cuda-compute)."""

from __future__ import annotations

from harness.framework.context import TestContext
from testbins.nvidia_node.common import NodeCheck, run_check

CUDA_COMPUTE = NodeCheck("cuda_compute", "nvidia-cuda-compute-check", "cuda-compute-check.sh",
                         "=== all CUDA-compute samples passed ===", env={"DEMO_SUITE_DIR": "/usr/bin"})


def test_cuda_compute(t: TestContext) -> None:
    """One pod with a GPU runs the nine CUDA samples of --nvidiaTestImage (deviceQuery and vectorAdd
    are TestSingleNodeUnitTest's); each must exit 0, the compute-capability-gated ones skip below it."""
    run_check(t, CUDA_COMPUTE, "pod reaches Succeeded", nodes=1, gpus=1)
