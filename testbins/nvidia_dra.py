"""e2e-nvidia-dra (also installed as nvidia-dra.test, upstream's name): upstream aws-k8s-tester's
test/cases/nvidia-dra suite under its test, feature and assessment names (TestGPUPresentLabel,
TestNvidiaDRAMultiNode/<test case>; testbins/nvidia_node/dra.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import Feature, Suite
from harness.jobs.assessment import ASSESSED_PARSE
from harness.runner import main as run_suite
from harness.verdict.bandwidth import BUSBW_KINDS
from testbins.nvidia_node import dra

SUITE = Suite("e2e-nvidia-dra", (
    "Upstream aws-k8s-tester's nvidia-dra suite: GPUs and EFAs through Dynamic Resource Allocation: an NCCL "
    "all_reduce_perf MPIJob across the nodes whose workers claim them with ResourceClaims (NVIDIA's DRA driver, "
    "dranet), and a claim no p5 node can satisfy stays unschedulable."
    ), aliases=("nvidia-dra.test",), devices_by_dra=True)
DRA = {"suite": ("nvidia-dra",)}
SUITE.test("TestGPUPresentLabel", upstream=True, feature="gpu-present-label",
           launches="nothing: reads the `--nodeType` nodes' labels (with `--autoModeEnabled`; skipped without)",
           settings=("--autoModeEnabled",), labels=DRA,
           assessments=("GPU nodes are labeled nvidia.com/gpu.present=true by the node image",))(
    dra.test_gpu_present_label)
SUITE.features("TestNvidiaDRAMultiNode", upstream=True, features=[
    Feature(case.name, dra.multi_node(case), {**DRA, "type": ("negative" if case.expect_failure else "positive",)},
            ("Worker pods remain Pending",) if case.expect_failure else ("MPIJob succeeds",))
    for case in dra.CASES
], checks=(*ASSESSED_PARSE, *BUSBW_KINDS, dra.DRA_EFA, dra.DRA_UNSCHEDULABLE),
    settings=("CONTAINER_TEST_IMAGE", "RDMA_DEVICE_DRA_DRIVER_IMAGE", "ACCELERATOR_DRA_DRIVER_IMAGE",
              "--autoModeEnabled", "DRA_PENDING_STABILIZATION", "JUDGE_BANDWIDTH"),
    launches="set-up once (upstream's TestMain): mpi-operator, `nvidia.com/gpu.present=true` on the nodes, NVIDIA's "
    "DRA driver (Helm chart nvidia-dra-driver-gpu 25.8.1) and dranet (`--rdmaDeviceDraDriverImage`), each only "
    "where no ResourceSlice shows it running; then per test case its ResourceClaimTemplates and upstream's MPIJob "
    "`multi-node-nccl-test`: `all_reduce_perf -b 8 -e 16G -f 2 -g 1 -c 1 -n 100` in `--containerTestImage`, a worker "
    "per node claiming its devices, a slot per claimed GPU. The bandwidth checks are informational unless "
    "`JUDGE_BANDWIDTH` (upstream judges no bandwidth)")


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
