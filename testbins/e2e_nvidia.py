"""e2e-nvidia (also installed as nvidia.test): upstream aws-k8s-tester's nvidia suite under its test and
feature names, plus this project's GPU and interconnect checks.

Upstream's (test/cases/nvidia): TestMPIJobPytorchTraining (single-node, multi-node:<nccl test>),
TestSingleNodeUnitTest (unit-test, hpc-benckmarks: upstream's spelling), TestNvidiaDriverCapabilities,
TestContainerdConfig; each runs what upstream runs, waits failing fast, and judges more than the
job's success where its output says more. Ours: TestNCCLAllReduce, TestNCCLTests, TestGPUCapacity,
TestNodePairs (all-reduce between pairs of nodes in two passes: the slow node named). Upstream's opt-in
GPU sharing (--timeSlicingEnabled, --mpsEnabled; upstream's names): TestTimeSlicing
(feature time-slicing) and TestMps (feature mps; TestMPS still selects it).

This module only declares the suite: its tests, in this order, with their features, labels and
assessments. Each test's code is in testbins/nvidia/ (one module per upstream file: see its docstring).
"""

from __future__ import annotations

import sys

from harness.framework.suite import ADDON_RBAC, GPU, GPU_EFA, NVIDIA, RUN_ONLY_RBAC, Feature, Suite
from harness.jobs.assessment import ASSESSED_PARSE, ASSESSED_TRAINING
from harness.runner import main as run_suite
from harness.setup.gpu_sharing import MPS, TIME_SLICING
from harness.verdict.bandwidth import BUSBW_KINDS
from harness.verdict.capacity import CAPACITY_EFA, CAPACITY_GPUS, CAPACITY_GPUS_SEEN
from harness.verdict.dcgm import DCGM
from harness.verdict.gpu_sharing import (
    GPU_SHARING_ADVERTISED,
    GPU_SHARING_COMPUTE_MODE,
    GPU_SHARING_OVERLAP,
    GPU_SHARING_UUIDS,
)
from testbins.nvidia import capabilities, capacity, containerd, dcgm, mpi, nccl, node_pairs, unit
from testbins.nvidia.gpu_sharing import gpu_sharing

SUITE = Suite("e2e-nvidia", "GPU and interconnect checks: upstream aws-k8s-tester's nvidia suite (MPIJob training and "
              "nccl-tests, GPU unit tests, driver capabilities, containerd config) and this project's bandwidth and "
              "GPU capacity checks.", aliases=("nvidia.test",))

# The kinds of check that judge the nccl-tests runs (a parse of their table, then bus bandwidth and the
# EFA path) and the settings every GPU-sharing test shares.
NCCL_TESTS_CHECKS = (*ASSESSED_PARSE, *BUSBW_KINDS, mpi.GDRDMA)
GPU_SHARING_SETTINGS = ("GPU_SHARING_REPLICAS", "INSTALL_DEVICE_PLUGIN")

# Every feature launches in its setup and judges in its assessments, each through t.assessment:
# --assess / --skip-assessment skip assessments one by one, as upstream's.
SUITE.test("TestNCCLAllReduce", labels=GPU, assessments=("bus bandwidth",), checks=(*ASSESSED_TRAINING, *BUSBW_KINDS),
           launches="a torch.distributed all-reduce sweep (`python -m workloads.allreduce`) across every node and GPU, "
           "judged as a run of the workloads (ranks, device, stragglers on its bus bandwidth) and on its bus bandwidth",
           settings=("LAUNCHER", "TRAINING_IMAGE", "NODE_COUNT"))(nccl.test_nccl_allreduce)
SUITE.features("TestNCCLTests", [
    Feature("single-node", nccl.ours_nccl("single"), GPU, ("MPIJob succeeds",)),
    Feature("multi-node", nccl.ours_nccl("multi"), GPU_EFA, ("MPIJob succeeds",)),
], checks=NCCL_TESTS_CHECKS, settings=("NCCL_TESTS_IMAGE", "EFA_PER_NODE", "NODE_COUNT"),
    launches="nccl-tests' `all_reduce_perf` in `NCCL_TESTS_IMAGE` as an MPIJob (`-b 8 -f 2`, an 8 MiB "
    "`NCCL_BUFFSIZE`): on one node, and across every node (skips on one node), each up to the size the node "
    "type's bandwidth floor was measured at, else 2G on one node and 16G across nodes")
SUITE.features("TestMPIJobPytorchTraining", upstream=True, features=[
    Feature("single-node", mpi.single_node, GPU, ("MPIJob succeeds",)),
    *(Feature(f"multi-node:{operation}", mpi.multi_node(operation), GPU_EFA, ("MPIJob succeeds",))
      for operation in mpi.UPSTREAM_NCCL_TESTS),
], checks=NCCL_TESTS_CHECKS, settings=("PYTORCH_IMAGE", "NCCL_TESTS_IMAGE", "EFA_PER_NODE", "JUDGE_BANDWIDTH"),
    launches="single-node: pytorch/examples' MNIST in `PYTORCH_IMAGE`, one process on one node (a Job), passing "
    "when the pod succeeds and the example printed its `Test set: ... Accuracy` line (upstream's command exits 0 "
    "even when it fails); multi-node:<test>: nccl-tests `<test>` in an MPIJob across every node (`-b 8 -e 16G` "
    "with an 8 MiB `NCCL_BUFFSIZE` on upstream's RDMA-read types, else `2G` / 4 MiB). The bandwidth checks are "
    "informational unless `JUDGE_BANDWIDTH` (upstream judges no bandwidth)")
SUITE.features("TestSingleNodeUnitTest", upstream=True, features=[
    Feature("unit-test", unit.unit_test, GPU, ("Unit test Job succeeds",)),
    Feature("hpc-benckmarks", unit.hpc_benchmarks, GPU, ("HPC test Job succeeds",)),
], settings=("NCCL_TESTS_IMAGE", "SKIP_UNIT_TEST_SUBCOMMAND"),
    launches="unit-test: upstream's `./gpu_unit_tests/unit_test` in `NCCL_TESTS_IMAGE` on one node, passing when "
    "the Job succeeds and every TAP line is `ok` (each recorded as the property `unit.<test>`; an image without "
    "the binary fails at once, naming the setting); hpc-benckmarks (upstream's spelling): NVIDIA's HPL on every "
    "GPU of one node, passing when HPL's residual check says `PASSED`")
SUITE.test("TestNvidiaDriverCapabilities", upstream=True, feature="nvidia-driver-capabilities-check", labels=NVIDIA,
           assessments=("Check Pod becomes ready",), settings=("ACCELERATOR",),
           launches="a pod with `NVIDIA_DRIVER_CAPABILITIES=all` running ModernGL over EGL (ubuntu 22.04) on one "
           "node; passes when the pod succeeds")(capabilities.test_nvidia_driver_capabilities)
SUITE.test("TestDcgmDiagnostics", upstream=True, feature="dcgm-diag", labels=GPU,
           assessments=("DCGM level-{dcgm_diag_level} diagnostic passes",), checks=(DCGM,),
           settings=("DCGM_DIAG_ENABLED", "NCCL_TESTS_IMAGE", "DCGM_IMAGE", "DCGM_DIAG_TIMEOUT_MINUTES"),
           launches="`dcgmi diag -r <level> -j -c <per-SKU config>` against an `nv-hostengine` in "
           "`--nvidiaTestImage` (or `DCGM_IMAGE`), a Job per node with all its GPUs (opt-in)")(
    dcgm.test_dcgm_diagnostics)
SUITE.features("TestDcgmDiagDeadlineSeconds", upstream=True, needs_cluster=False, plain=True, features=[
    Feature(name, dcgm.deadline_case(minutes, want)) for name, minutes, want in dcgm.DEADLINE_CASES
], settings=("DCGM_DIAG_TIMEOUT_MINUTES",),
    launches="nothing: upstream's unit test of the DCGM Job's deadline (a minute inside `--dcgmDiagTimeoutMinutes`, "
    "which must be at least 2), run on this project's; a subtest per case")
SUITE.test("TestDcgmDiagDeadlineAlwaysPositive", upstream=True, needs_cluster=False, plain=True,
           settings=("DCGM_DIAG_TIMEOUT_MINUTES",),
           launches="nothing: upstream's unit test that every accepted `--dcgmDiagTimeoutMinutes` up to 600 renders "
           "a positive Job deadline, run on this project's")(dcgm.test_deadline_always_positive)
SUITE.test("TestContainerdConfig", upstream=True, feature="containerd-config-check", labels=NVIDIA,
           assessments=("DaemonSet becomes ready",), settings=("TOLERATIONS",),
           launches="a DaemonSet running upstream's script over each node's `/etc/containerd/config.toml`; passes "
           "when a Ready pod on every node says `containerd config check PASSED.`")(containerd.test_containerd_config)
SUITE.test("TestGPUCapacity", labels=GPU, assessments=("GPUs seen",),
           checks=(CAPACITY_GPUS, CAPACITY_EFA, CAPACITY_GPUS_SEEN), settings=("NCCL_TESTS_IMAGE",),
           launches="what every node of the type advertises (`nvidia.com/gpu`, `vpc.amazonaws.com/efa`) judged, then "
           "a pod pinned on each node running `nvidia-smi -L` in `NCCL_TESTS_IMAGE`")(capacity.test_gpu_capacity)
SUITE.test("TestNodePairs", labels=GPU, assessments=("the slow node named",), checks=(node_pairs.NODE_PAIRS,),
           settings=("NCCL_TESTS_IMAGE", "NODE_COUNT"),
           launches="all-reduce between pairs of nodes, every pair of a pass at once, in two passes with different "
           "partners (nccl-tests up to 1 GiB on GPUs, one 16 MiB size timed for 3 s on CPU); a subtest per node")(
    node_pairs.test_node_pairs)
# harness/jobs/gpu_sharing.py judges them in this order: what the nodes advertise, the overlap (and
# the GPUs the pods name), the compute mode.
SUITE.features("TestTimeSlicing", upstream=True, features=[
    Feature("time-slicing", gpu_sharing(TIME_SLICING), GPU,
            ("node advertises time-sliced GPUs", "oversubscribed pods share a physical GPU concurrently")),
], checks=(GPU_SHARING_ADVERTISED, GPU_SHARING_OVERLAP, GPU_SHARING_UUIDS),
    settings=("TIME_SLICING_ENABLED", *GPU_SHARING_SETTINGS),
    launches="the NVIDIA device plugin replaced by one sharing each GPU by time-slicing, every node of the type "
    "filled with pods of one GPU each, then everything restored (opt-in, upstream's #813)",
    rbac=(RUN_ONLY_RBAC, ADDON_RBAC))
# upstream's name is TestMps (#817); TestMPS, this project's earlier name, still selects it.
SUITE.features("TestMps", upstream=True, aliases=("TestMPS",), features=[
    Feature("mps", gpu_sharing(MPS), GPU, ("node advertises MPS-shared GPUs",
                                           "oversubscribed pods share a physical GPU concurrently",
                                           "GPU is in EXCLUSIVE_PROCESS compute mode")),
], checks=(GPU_SHARING_ADVERTISED, GPU_SHARING_OVERLAP, GPU_SHARING_UUIDS, GPU_SHARING_COMPUTE_MODE),
    settings=("MPS_ENABLED", *GPU_SHARING_SETTINGS),
    launches="the same through the NVIDIA MPS control daemon (opt-in, upstream's #817)",
    rbac=(RUN_ONLY_RBAC, ADDON_RBAC))


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
