"""TestGPUCapacity (this project's): the GPUs each node advertises and a pod on it sees."""

from __future__ import annotations

import re

from harness.cluster.logs import CapturedLog
from harness.framework.context import TestContext
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from harness.verdict.capacity import check_gpus_seen, judge_advertised
from harness.verdict.checks import Verdict

# A line of `nvidia-smi -L`: one per GPU the pod sees.
GPU_LINE = re.compile(r"^GPU \d+: ")


def gpus_listed(log: CapturedLog) -> int:
    """How many GPUs `nvidia-smi -L` listed in a pod's log."""
    return sum(1 for line in read_lines(log.path) if GPU_LINE.match(line))


def test_gpu_capacity(t: TestContext) -> None:
    """Every node advertises the GPUs (and EFA devices) its type should have (harness/verdict/capacity.py:
    the table, else the most any node advertises; GPUS_PER_NODE wins), and a pod on each node sees
    them all."""
    if t.cfg.accelerator == "cpu":
        t.skip("no GPUs to check with ACCELERATOR=cpu")
    # The whole test is its one assessment: what the nodes advertise is judged before anything is
    # launched (a node short of GPUs would leave the listing's pod Pending), so there is no setup.
    t.assessment("GPUs seen", lambda: gpus_seen(t))


def gpus_seen(t: TestContext) -> None:
    """The assessment: advertised GPUs and EFA judged, then `nvidia-smi -L` on every node."""
    record_verdict(t, judge_advertised(t.topology))
    listing = launch(t, Workload("gpu-capacity", binary="nvidia-smi", args=("-L",), image=image(t, "nccl_tests_image"),
                                 launcher="per-node"))
    listing.wait_succeeded()
    seen = [(log.pod, log.node, gpus_listed(log)) for log in listing.capture_logs()]
    for _, node, count in seen:
        t.property(f"node.{node}.gpus_seen", count)
    record_verdict(t, Verdict([check_gpus_seen(seen, t.topology.gpus_per_node)]))


