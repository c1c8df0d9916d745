"""e2e-nvidia: GPU and interconnect suites (drop-in for the upstream Go binary)."""

from __future__ import annotations

import re
import sys

from harness.bandwidth import judge_busbw, sweep_max_bytes
from harness.capacity import check_gpus_seen, judge_advertised
from harness.checks import Check, Verdict
from harness.launchers import LAUNCHERS, Workload
from harness.logs import CapturedLog
from harness.measurements import record_verdict, training_verdict
from harness.metrics import read_lines
from harness.runner import main as run_suite
from harness.suite import Suite
from harness.testing import TestContext
from harness.training_job import launch, require_launcher
from harness.verdict import check_parse

# With EFA on RDMA-capable instance types NCCL must use Libfabric with GPUDirect RDMA.
EFA_GDRDMA = re.compile(r"\[send\] via NET/.*Libfabric/.*/GDRDMA")
RDMA_CAPABLE_TYPES = re.compile(r"^(p4d|p4de|p5|p5e|p5en|p6-b200|trn1|trn1n|trn2)\.")
NCCL_TESTS_BINARY = "/opt/nccl-tests/build/all_reduce_perf"
# A line of `nvidia-smi -L`: one per GPU the pod sees.
GPU_LINE = re.compile(r"^GPU \d+: ")

SUITE = Suite("e2e-nvidia", "GPU and interconnect checks: all-reduce bandwidth through torch.distributed and "
              "nccl-tests, and the GPUs every node advertises are usable from pods.")


@SUITE.test("TestNCCLAllReduce")
def test_nccl_allreduce(t: TestContext) -> None:
    """torch.distributed all-reduce sweep across all nodes and GPUs; bus bandwidth checked."""
    size = "tiny" if t.cfg.accelerator == "cpu" else "default"
    nodes = t.topology.node_count
    # Up to where the node type's bandwidth floor was measured (the verdict judges that size).
    needed = sweep_max_bytes(t.topology.node_type, nodes, "allreduce")
    sweep = ("--max-bytes", needed) if needed else ()
    job = launch(t, Workload("nccl-allreduce", "workloads.allreduce", ("--size", size, *sweep)))
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    verdict, meta = training_verdict(t, metrics, job.world_size, "allreduce")
    verdict.extend(judge_busbw("allreduce", metrics.sweep, t.topology.node_type, job.node_count, t.cfg.min_busbw))
    record_verdict(t, verdict, metrics, meta)


def used_gdrdma(logs: list[CapturedLog]) -> bool:
    """Whether NCCL said it sends over Libfabric with GPUDirect RDMA (read line by line: joining
    every log into one string held all of them in memory at once)."""
    current = [e for e in logs if not e.previous and e.path.exists()]
    return any(EFA_GDRDMA.search(line) for e in current for line in read_lines(e.path))


def nccl_tests(t: TestContext, nodes: int) -> None:
    """nccl-tests all_reduce_perf in an MPIJob, like upstream; EFA path checked where it applies."""
    max_bytes = sweep_max_bytes(t.topology.node_type, nodes, "all_reduce_perf") or ("2G" if nodes == 1 else "16G")
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
    verdict = Verdict([check_parse(metrics)])
    verdict.extend(judge_busbw("all_reduce_perf", metrics.sweep, t.topology.node_type, nodes, t.cfg.min_busbw))
    if efa and RDMA_CAPABLE_TYPES.match(t.topology.node_type):
        verdict.add(check_gdrdma(t, job.capture_logs()))
    record_verdict(t, verdict, metrics)


def check_gdrdma(t: TestContext, logs: list[CapturedLog]) -> Check:
    """With EFA on an RDMA-capable type, NCCL sends over Libfabric with GPUDirect RDMA."""
    if not used_gdrdma(logs):
        return Check.failed("efa.gdrdma", f"nccl-tests: EFA is enabled on {t.topology.node_type} but NCCL did not "
                                          f"use Libfabric with GPUDirect RDMA: no line matches {EFA_GDRDMA.pattern!r}")
    t.property("efa.gdrdma", "true")
    return Check.passed("efa.gdrdma", "NCCL sent over Libfabric with GPUDirect RDMA")


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
    """Every node advertises the GPUs (and EFA devices) its type should have (harness/capacity.py:
    the table, else the most any node advertises; GPUS_PER_NODE wins), and a pod on each node sees
    them all."""
    if t.cfg.accelerator == "cpu":
        t.skip("no GPUs to check with ACCELERATOR=cpu")
    record_verdict(t, judge_advertised(t.topology))
    listing = launch(t, Workload("gpu-capacity", binary="nvidia-smi", args=("-L",), image=t.cfg.nccl_tests_image,
                                 launcher="per-node"))
    listing.wait_succeeded()
    seen = [(log.pod, log.node, gpus_listed(log)) for log in listing.capture_logs()]
    for _, node, count in seen:
        t.property(f"node.{node}.gpus_seen", count)
    record_verdict(t, Verdict([check_gpus_seen(seen, t.topology.gpus_per_node)]))


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
