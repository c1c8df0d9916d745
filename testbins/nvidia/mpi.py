"""TestMPIJobPytorchTraining (upstream's mpi_test.go): single-node (pytorch/examples' MNIST) and
multi-node:<nccl test> (nccl-tests in an MPIJob, bus bandwidth and the EFA path judged)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harness.cluster.logs import CapturedLog
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.framework.suite import TestFunc
from harness.jobs.assessment import assess
from harness.jobs.images import image
from harness.jobs.job import Job, launch
from harness.jobs.launchers import Launcher
from harness.jobs.workload import Workload
from harness.metrics.records import WorkloadMetrics, read_lines
from harness.verdict.bandwidth import judge_busbw
from harness.verdict.checks import Check, Verdict, beyond_upstream, declare
from testbins.nvidia.common import NCCL_TESTS_DIR, first_match, require_gpus

GDRDMA = declare(
    "efa.gdrdma",
    "with EFA on an RDMA-read node type, NCCL did not send over `Libfabric/.../GDRDMA`",
    "`--efaEnabled`, `NODE_TYPE`",
    settings=("--efaEnabled", "NODE_TYPE"),
    only_when="`--efaEnabled` on an RDMA-read node type: upstream's list under its test name, "
    "`RDMA_CAPABLE_TYPES` (testbins/nvidia/nccl.py) under TestNCCLTests",
)

# With EFA on RDMA-capable instance types NCCL must use Libfabric with GPUDirect RDMA.
EFA_GDRDMA = re.compile(r"\[send\] via NET/.*Libfabric/.*/GDRDMA")
# upstream's instanceSupportsRdmaRead (test/cases/nvidia/mpi_test.go): larger sweeps and the GDRDMA check.
UPSTREAM_RDMA_READ_TYPES = ("p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5e.48xlarge", "p5en.48xlarge")
UPSTREAM_NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "alltoall_perf")


def used_gdrdma(logs: list[CapturedLog]) -> bool:
    """Whether NCCL said it sends over Libfabric with GPUDirect RDMA (read line by line: joining
    every log into one string held all of them in memory at once)."""
    current = [e for e in logs if not e.previous and e.path.exists()]
    return any(EFA_GDRDMA.search(line) for e in current for line in read_lines(e.path))


@dataclass(frozen=True)
class NcclSweep:
    """One nccl-tests run in an MPIJob: which collective, on how many nodes, how far, which buffer."""

    operation: str
    job_name: str
    nodes: int | None  # None: every node
    max_bytes: str
    buffsize: int
    # When EFA is in use: must NCCL show GPUDirect RDMA over Libfabric?
    requires_gdrdma: bool
    # upstream's test (TestMPIJobPytorchTraining): the bandwidth checks decide only with JUDGE_BANDWIDTH.
    upstream: bool = False
    iterations: int = 10  # nccl-tests' -n (upstream's nvidia-dra MPIJob runs 100)
    # What the job adds to the ranks' environment (upstream's nvidia-dra MPIJob's -x NCCL_* values).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    image_setting: str = "nccl_tests_image"  # the image setting it runs (nvidia-dra: container_test_image)


def nccl_workload(t: TestContext, sweep: NcclSweep) -> Workload:
    """The sweep's nccl-tests program in an MPIJob: NCCL_DEBUG=INFO, its buffer, EFA's variables
    where the nodes advertise EFA."""
    efa = bool(t.topology.efa_per_node)
    return Workload(
        sweep.job_name, binary=f"{NCCL_TESTS_DIR}/{sweep.operation}",
        args=("-b", "8", "-e", sweep.max_bytes, "-f", "2", "-c", "1", "-n", str(sweep.iterations)),
        image=image(t, sweep.image_setting), launcher="mpi", nodes=sweep.nodes,
        extra_env={"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": str(sweep.buffsize),
                   **({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"} if efa else {}), **sweep.extra_env})


def run_nccl_tests(t: TestContext, sweep: NcclSweep, launcher: Launcher | None = None,
                   more: Callable[[Job], list[Check]] | None = None) -> None:
    """nccl-tests in an MPIJob like upstream's, launched (by `launcher`, default the mpi one); then
    the assessment `MPIJob succeeds`: results, bus bandwidth, the EFA path and `more`'s checks."""
    job = launch(t, nccl_workload(t, sweep), launcher=launcher)
    nodes = sweep.nodes or t.topology.node_count

    def bandwidth_and_path(metrics: WorkloadMetrics) -> Verdict:
        verdict = judge_busbw(sweep.operation, metrics.sweep, t.topology.node_type, nodes, t.cfg.min_busbw)
        if sweep.upstream:
            verdict.checks = beyond_upstream(verdict.checks, t.name, t.cfg.judge_bandwidth,
                                             judges="judges no bandwidth",
                                             switch="JUDGE_BANDWIDTH=true or --judgeBandwidth makes this decide")
        # upstream's: judged only with --efaEnabled=true (its default false checks nothing about EFA)
        if t.cfg.efa_enabled and sweep.requires_gdrdma:
            verdict.add(check_gdrdma(t, job.capture_logs()))
        for check in more(job) if more is not None else ():
            verdict.add(check)
        return verdict

    def succeeds() -> None:
        job.wait_succeeded()
        assess(t, job, more=bandwidth_and_path)

    t.assessment("MPIJob succeeds", succeeds)


def check_gdrdma(t: TestContext, logs: list[CapturedLog]) -> Check:
    """With EFA on an RDMA-capable type, NCCL sends over Libfabric with GPUDirect RDMA."""
    if not used_gdrdma(logs):
        return GDRDMA.failed(f"nccl-tests: EFA is enabled on {t.topology.node_type} but NCCL did not "
                             f"use Libfabric with GPUDirect RDMA: no line matches {EFA_GDRDMA.pattern!r}")
    t.property("efa.gdrdma", "true")
    return GDRDMA.passed("NCCL sent over Libfabric with GPUDirect RDMA")


def upstream_sweep(operation: str, node_type: str) -> tuple[str, int]:
    """upstream's MaxBytes and NCCL_BUFFSIZE: 16G and 8 MiB on RDMA-read types (but all-to-all on
    p4 keeps the defaults), else 2G and 4 MiB."""
    if node_type in UPSTREAM_RDMA_READ_TYPES and not (operation == "alltoall_perf" and "p4" in node_type):
        return "16G", 8388608
    return "2G", 4194304


def multi_node(operation: str) -> TestFunc:
    """upstream's multi-node:<operation>: nccl-tests across every node in an MPIJob."""

    def run(t: TestContext) -> None:
        require_gpus(t)
        max_bytes, buffsize = upstream_sweep(operation, t.topology.node_type)
        job_name = f"multi-node-{operation}".replace("_", "-")
        run_nccl_tests(t, NcclSweep(operation, job_name, None, max_bytes, buffsize,
                                    t.topology.node_type in UPSTREAM_RDMA_READ_TYPES, upstream=True))

    return run


# upstream's single-node feature: pytorch/examples' MNIST for one epoch in --pytorchImage.
UPSTREAM_MNIST = ('import os; os.system("git clone https://github.com/pytorch/examples.git pytorch-examples"); '
                  'os.system("git -C pytorch-examples checkout 0f0c9131ca5c79d1332dce1f4c06fe942fbdc665"); '
                  'os.system("python pytorch-examples/mnist/main.py --epochs 1")')
MNIST_TEST_LINE = re.compile(r"Test set: Average loss: (?P<loss>[\d.]+), Accuracy: (?P<right>\d+)/(?P<total>\d+)")


def single_node(t: TestContext) -> None:
    """upstream's single-node: one process runs pytorch/examples' MNIST in --pytorchImage on one node.
    upstream's command ignores the example's failures (os.system), so the verdict also needs the
    example's `Test set: ... Accuracy` line."""
    require_gpus(t)
    job = launch(t, Workload("pytorch-training-single-node", binary="python", args=("-c", UPSTREAM_MNIST),
                             image=image(t, "pytorch_image"), launcher="per-node", nodes=1,
                             extra_env={"NCCL_DEBUG": "INFO"}))

    def succeeds() -> None:
        job.wait_succeeded()
        found = first_match(job, MNIST_TEST_LINE)
        if found is None:
            raise TestFailure("single-node: the MNIST example printed no 'Test set: Average loss: ..., "
                              "Accuracy: ...' line: it did not train (upstream's command exits 0 even so)")
        t.property("mnist.test_loss", found["loss"])
        t.property("mnist.accuracy", f"{int(found['right']) / int(found['total']):.4f}")

    t.assessment("MPIJob succeeds", succeeds)


