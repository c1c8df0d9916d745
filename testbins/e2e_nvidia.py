"""e2e-nvidia: GPU and interconnect suites (drop-in for the upstream Go binary)."""

from __future__ import annotations

import re
import sys

from harness.errors import TestFailure
from harness.launchers import LAUNCHERS, Workload
from harness.logs import CapturedLog
from harness.metrics import read_lines
from harness.runner import main as run_suite
from harness.suite import Suite
from harness.testing import TestContext
from harness.training_job import launch, require_launcher
from harness.verdict import (
    Threshold,
    check_advertised_gpus,
    check_all_ranks_reported,
    check_busbw,
    check_gpus_seen,
    threshold,
)

# With EFA on RDMA-capable instance types NCCL must use Libfabric with GPUDirect RDMA.
EFA_GDRDMA = re.compile(r"\[send\] via NET/.*Libfabric/.*/GDRDMA")
RDMA_CAPABLE_TYPES = re.compile(r"^(p4d|p4de|p5|p5e|p5en|p6-b200|trn1|trn1n|trn2)\.")
NCCL_TESTS_BINARY = "/opt/nccl-tests/build/all_reduce_perf"
# A line of `nvidia-smi -L`: one per GPU the pod sees.
GPU_LINE = re.compile(r"^GPU \d+: ")

SUITE = Suite("e2e-nvidia", "GPU and interconnect checks: all-reduce bandwidth through torch.distributed and "
              "nccl-tests, and the GPUs every node advertises are usable from pods.")


def busbw_floor(t: TestContext) -> Threshold:
    """NCCL_TESTS_MIN_BW, else the node type's table row; recorded as a JUnit property."""
    floor = threshold(t.cfg.min_busbw, "NCCL_TESTS_MIN_BW", t.topology.node_type, "busbw_gbps")
    t.property("busbw.expected_gbps", floor.value if floor.value is not None else "none")
    return floor


@SUITE.test("TestNCCLAllReduce")
def test_nccl_allreduce(t: TestContext) -> None:
    """torch.distributed all-reduce sweep across all nodes and GPUs; bus bandwidth checked."""
    size = "tiny" if t.cfg.accelerator == "cpu" else "default"
    job = launch(t, Workload("nccl-allreduce", "workloads.allreduce", ("--size", size)))
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    check_all_ranks_reported(metrics, job.world_size)
    busbw = [r.values["busbw_avg"] for r in metrics.ranks if r.values.get("busbw_avg") is not None]
    check_busbw(min(busbw) if busbw else None, busbw_floor(t))


def used_gdrdma(logs: list[CapturedLog]) -> bool:
    """Whether NCCL said it sends over Libfabric with GPUDirect RDMA (read line by line: joining
    every log into one string held all of them in memory at once)."""
    current = [e for e in logs if not e.previous and e.path.exists()]
    return any(EFA_GDRDMA.search(line) for e in current for line in read_lines(e.path))


def nccl_tests(t: TestContext, nodes: int) -> None:
    """nccl-tests all_reduce_perf in an MPIJob, like upstream; EFA path checked where it applies."""
    max_bytes = "2G" if nodes == 1 else "16G"
    efa = bool(t.topology.efa_per_node)
    workload = Workload(
        f"nccl-tests-{nodes}n", binary=NCCL_TESTS_BINARY,
        args=("-b", "8", "-e", max_bytes, "-f", "2", "-c", "1", "-n", "10"),
        image=t.cfg.nccl_tests_image, launcher="mpi", nodes=nodes,
        extra_env={"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": str(8 * 1024 * 1024),
                   **({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"} if efa else {})})
    job = launch(t, workload)
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    values = metrics.ranks[0].values
    if values.get("out_of_bounds"):
        raise TestFailure(f"nccl-tests: {values['out_of_bounds']} out-of-bounds values (wrong results)")
    check_busbw(values.get("busbw_avg"), busbw_floor(t))
    if efa and RDMA_CAPABLE_TYPES.match(t.topology.node_type):
        if not used_gdrdma(job.capture_logs()):
            raise TestFailure(f"nccl-tests: EFA is enabled on {t.topology.node_type} but NCCL did not use "
                              f"Libfabric with GPUDirect RDMA: no line matches {EFA_GDRDMA.pattern!r}")
        t.property("efa.gdrdma", "true")


@SUITE.test("TestNCCLTests")
def test_nccl_tests(t: TestContext) -> None:
    """nccl-tests all_reduce_perf on one node and across all nodes (subtests like upstream)."""
    if t.cfg.accelerator == "cpu":
        t.skip("nccl-tests needs NVIDIA GPUs (ACCELERATOR=cpu)")
    require_launcher(t.cluster, LAUNCHERS["mpi"], "TestNCCLTests", "exclude it with -test.run")
    t.run("single-node", lambda sub: nccl_tests(sub, 1))

    def multi_node(sub: TestContext) -> None:
        if sub.topology.node_count < 2:
            sub.skip("one node: the multi-node variant needs at least 2")
        nccl_tests(sub, sub.topology.node_count)

    t.run("multi-node", multi_node)


def gpus_listed(log: CapturedLog) -> int:
    """How many GPUs `nvidia-smi -L` listed in a pod's log."""
    return sum(1 for line in read_lines(log.path) if GPU_LINE.match(line))


@SUITE.test("TestGPUCapacity")
def test_gpu_capacity(t: TestContext) -> None:
    """Every node advertises the expected GPUs, and a pod on each node sees them all."""
    if t.cfg.accelerator == "cpu":
        t.skip("no GPUs to check with ACCELERATOR=cpu")
    expected = t.topology.gpus_per_node
    check_advertised_gpus(t.topology.nodes, expected)
    listing = launch(t, Workload("gpu-capacity", binary="nvidia-smi", args=("-L",), image=t.cfg.nccl_tests_image,
                                 launcher="per-node"))
    listing.wait_succeeded()
    seen = [(log.pod, log.node, gpus_listed(log)) for log in listing.capture_logs()]
    for _, node, count in seen:
        t.property(f"node.{node}.gpus_seen", count)
    check_gpus_seen(seen, expected)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
