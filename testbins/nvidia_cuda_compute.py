"""e2e-nvidia-cuda-compute (also installed as nvidia-cuda-compute.test, upstream's name): upstream
aws-k8s-tester's test/cases/nvidia-cuda-compute suite under its test, feature and assessment names
(TestCUDACompute; testbins/nvidia_node/cuda_compute.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import cuda_compute

SUITE = Suite("e2e-nvidia-cuda-compute", (
    "Upstream aws-k8s-tester's nvidia-cuda-compute suite: CUDA compute works: the CUDA samples of "
    "--nvidiaTestImage (tensor cores, cooperative groups, warp intrinsics, atomics, async copies, unified"
    " memory) each pass."
    ), aliases=("nvidia-cuda-compute.test",))
SUITE.test("TestCUDACompute", upstream=True, feature="nvidia-cuda-compute",
           launches="`manifests/scripts/cuda-compute-check.sh` (nine CUDA samples of `--nvidiaTestImage`), one pod "
           "with one GPU",
           checks=(cuda_compute.CUDA_COMPUTE.kind,),
           settings=("NCCL_TESTS_IMAGE",),
           labels=GPU,
           assessments=("pod reaches Succeeded",))(
    cuda_compute.test_cuda_compute)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
