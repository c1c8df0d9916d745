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

from harness.framework.suite import GPU, GPU_EFA, NVIDIA, Feature, Suite
from harness.runner import main as run_suite
from harness.setup.gpu_sharing import MPS, TIME_SLICING
from testbins.nvidia import capabilities, capacity, containerd, dcgm, mpi, nccl, node_pairs, unit
from testbins.nvidia.gpu_sharing import gpu_sharing

SUITE = Suite("e2e-nvidia", "GPU and interconnect checks: upstream aws-k8s-tester's nvidia suite (MPIJob training and "
              "nccl-tests, GPU unit tests, driver capabilities, containerd config) and this project's bandwidth and "
              "GPU capacity checks.", aliases=("nvidia.test",))

# Every feature launches in its setup and judges in its assessments, each through t.assessment:
# --assess / --skip-assessment skip assessments one by one, as upstream's.
SUITE.test("TestNCCLAllReduce", labels=GPU, assessments=("bus bandwidth",))(nccl.test_nccl_allreduce)
SUITE.features("TestNCCLTests", [
    Feature("single-node", nccl.ours_nccl("single"), GPU, ("MPIJob succeeds",)),
    Feature("multi-node", nccl.ours_nccl("multi"), GPU_EFA, ("MPIJob succeeds",)),
])
SUITE.features("TestMPIJobPytorchTraining", upstream=True, features=[
    Feature("single-node", mpi.single_node, GPU, ("MPIJob succeeds",)),
    *(Feature(f"multi-node:{operation}", mpi.multi_node(operation), GPU_EFA, ("MPIJob succeeds",))
      for operation in mpi.UPSTREAM_NCCL_TESTS),
])
SUITE.features("TestSingleNodeUnitTest", upstream=True, features=[
    Feature("unit-test", unit.unit_test, GPU, ("Unit test Job succeeds",)),
    Feature("hpc-benckmarks", unit.hpc_benchmarks, GPU, ("HPC test Job succeeds",)),
])
SUITE.test("TestNvidiaDriverCapabilities", upstream=True, feature="nvidia-driver-capabilities-check", labels=NVIDIA,
           assessments=("Check Pod becomes ready",))(capabilities.test_nvidia_driver_capabilities)
SUITE.test("TestDcgmDiagnostics", upstream=True, feature="dcgm-diag", labels=GPU,
           assessments=("DCGM level-{dcgm_diag_level} diagnostic passes",))(dcgm.test_dcgm_diagnostics)
SUITE.test("TestContainerdConfig", upstream=True, feature="containerd-config-check", labels=NVIDIA,
           assessments=("DaemonSet becomes ready",))(containerd.test_containerd_config)
SUITE.test("TestGPUCapacity", labels=GPU, assessments=("GPUs seen",))(capacity.test_gpu_capacity)
SUITE.test("TestNodePairs", labels=GPU, assessments=("the slow node named",))(node_pairs.test_node_pairs)
# harness/jobs/gpu_sharing.py judges them in this order: what the nodes advertise, the overlap (and
# the GPUs the pods name), the compute mode.
SUITE.features("TestTimeSlicing", upstream=True, features=[
    Feature("time-slicing", gpu_sharing(TIME_SLICING), GPU,
            ("node advertises time-sliced GPUs", "oversubscribed pods share a physical GPU concurrently")),
])
# upstream's name is TestMps (#817); TestMPS, this project's earlier name, still selects it.
SUITE.features("TestMps", upstream=True, aliases=("TestMPS",), features=[
    Feature("mps", gpu_sharing(MPS), GPU, ("node advertises MPS-shared GPUs",
                                           "oversubscribed pods share a physical GPU concurrently",
                                           "GPU is in EXCLUSIVE_PROCESS compute mode")),
])

def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
