"""TestNCCLAllReduce and TestNCCLTests (this project's): bus bandwidth across the nodes, by
torch.distributed (workloads.allreduce) and by nccl-tests' all_reduce_perf in an MPIJob."""

from __future__ import annotations

import re

from harness.framework.context import TestContext
from harness.framework.suite import TestFunc
from harness.jobs.assessment import assess, busbw_baseline
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.verdict.bandwidth import judge_busbw, sweep_max_bytes
from testbins.nvidia.common import require_gpus
from testbins.nvidia.mpi import NcclSweep, run_nccl_tests

# Instance types with EFA RDMA: there NCCL must send over Libfabric with GPUDirect RDMA (mpi.check_gdrdma).
RDMA_CAPABLE_TYPES = re.compile(r"^(p4d|p4de|p5|p5e|p5en|p6-b200|trn1|trn1n|trn2)\.")


def test_nccl_allreduce(t: TestContext) -> None:
    """torch.distributed all-reduce sweep across all nodes and GPUs; bus bandwidth checked."""
    size = "tiny" if t.cfg.accelerator == "cpu" else "default"
    nodes = t.topology.node_count
    # Up to where the node type's bandwidth floor was measured (the verdict judges that size).
    needed = sweep_max_bytes(t.topology.node_type, nodes, "allreduce")
    sweep = ("--max-bytes", needed) if needed else ()
    job = launch(t, Workload("nccl-allreduce", "workloads.allreduce", ("--size", size, *sweep)))

    def bus_bandwidth() -> None:
        job.wait_succeeded()
        assess(t, job, "allreduce", lambda metrics: judge_busbw(
            "allreduce", metrics.sweep, t.topology.node_type, job.node_count, t.cfg.min_busbw,
            busbw_baseline(t, metrics)))

    t.assessment("bus bandwidth", bus_bandwidth)


def ours_nccl(nodes: str) -> TestFunc:
    """TestNCCLTests' all_reduce_perf on one node or across all of them."""

    def run(t: TestContext) -> None:
        require_gpus(t)
        count = 1 if nodes == "single" else t.topology.node_count
        if nodes == "multi" and count < 2:
            t.skip("one node: the multi-node variant needs at least 2")
        rdma = bool(RDMA_CAPABLE_TYPES.match(t.topology.node_type))
        t.logf("nccl-tests all_reduce_perf on %d node(s)", count)
        # Far enough to reach the size the node type's floor was measured at (harness/verdict/bandwidth.py).
        max_bytes = sweep_max_bytes(t.topology.node_type, count, "all_reduce_perf") or ("2G" if count == 1 else "16G")
        run_nccl_tests(t, NcclSweep("all_reduce_perf", f"nccl-tests-{count}n", count, max_bytes, 8 * 1024 * 1024,
                                    rdma))

    return run


