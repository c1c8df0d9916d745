"""GPU sharing judged (TestTimeSlicing, TestMps): what the device plugin advertises, whether the
pods sharing a node's GPUs ran at the same time, which GPU each one saw, and its compute mode.

Pure: given the nodes' allocatable and physical GPU counts, the pods' run intervals and the line
each pod printed (`nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader`), never the
cluster. Why each check proves what it says:
- advertised: a sharing device plugin advertises physical x replicas `nvidia.com/gpu` per node;
  a node still at its physical count (or anything else) shares nothing.
- overlap: more pods holding a GPU at one moment than the node has GPUs. A Job of N pods over one
  GPU also succeeds without sharing (each pod frees the GPU as it exits), so only pods observed
  running at the same time prove that the GPUs were handed out several times.
- uuids: every pod names the GPU it was given; a node's pods name no more distinct GPUs than it
  has, none more than `replicas` times, and at least one GPU is named by two pods or more.
- compute mode (MPS only): EXCLUSIVE_PROCESS, which only the MPS control daemon sets: the one
  thing that tells MPS from time-slicing on the GPU itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.verdict.checks import Check, declare

GPU_SHARING_ADVERTISED = declare(
    "gpu_sharing.advertised",
    "a node does not advertise physical x `GPU_SHARING_REPLICAS` `nvidia.com/gpu` (named, with both counts). Where "
    "the nodes' sum is right (upstream's criterion), informational unless JUDGE_STRICT",
    "`GPU_SHARING_REPLICAS`",
    settings=("GPU_SHARING_REPLICAS", "JUDGE_STRICT"),
)
GPU_SHARING_OVERLAP = declare(
    "gpu_sharing.overlap",
    "the sharing pods were not all running at once, or no more of them than the node's GPUs",
)
GPU_SHARING_UUIDS = declare(
    "gpu_sharing.uuids",
    "a pod named no GPU, the pods name more GPUs than the node has, one more than `replicas` times, or none twice",
    "`GPU_SHARING_REPLICAS`",
    settings=("GPU_SHARING_REPLICAS",),
)
GPU_SHARING_COMPUTE_MODE = declare(
    "gpu_sharing.compute_mode",
    "(MPS) a GPU not in compute mode `Exclusive_Process`",
    only_when="MPS shares the GPUs",
)

# One line of `nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader`: `GPU-<uuid>, <mode>`.
REPORT_LINE = re.compile(r"^(?P<uuid>GPU-[0-9A-Fa-f-]+),\s*(?P<mode>[A-Za-z_]+)\s*$")
# nvidia-smi's spelling of the mode the MPS control daemon sets (`nvidia-smi -c EXCLUSIVE_PROCESS`).
EXCLUSIVE_PROCESS = "Exclusive_Process"


@dataclass(frozen=True)
class GpuReport:
    """What one pod said of the GPU it was given."""

    pod: str
    node: str
    uuid: str
    compute_mode: str


def parse_report(pod: str, node: str, lines: Iterable[str]) -> GpuReport | None:
    """The first report line of a pod's log; None when it printed none."""
    for line in lines:
        match = REPORT_LINE.match(line.strip())
        if match:
            return GpuReport(pod, node, match["uuid"], match["mode"])
    return None


def check_advertised(allocatable: Mapping[str, int], physical: Mapping[str, int], replicas: int) -> Check:
    """Every node advertises physical x replicas GPUs; the nodes that do not are named."""
    wrong = {node: (allocatable.get(node, 0), count * replicas) for node, count in sorted(physical.items())
             if allocatable.get(node, 0) != count * replicas}
    if not physical:
        return GPU_SHARING_ADVERTISED.failed("no node with GPUs to share")
    if wrong:
        named = ", ".join(f"{node} advertises {got} nvidia.com/gpu, expected {want} ({physical[node]} GPUs x "
                          f"{replicas} replicas)" for node, (got, want) in wrong.items())
        return GPU_SHARING_ADVERTISED.failed(f"the device plugin does not share the GPUs: {named}")
    total = sum(physical.values())
    return GPU_SHARING_ADVERTISED.passed(f"{len(physical)} node(s) advertise {total} GPUs x {replicas} "
                                                  f"replicas = {total * replicas} nvidia.com/gpu",
                        measured=float(sum(allocatable[n] for n in physical)), expected=float(total * replicas))


def advertised_in_sum(allocatable: Mapping[str, int], physical: Mapping[str, int], replicas: int) -> bool:
    """upstream's criterion (TestTimeSlicing, TestMps): the nodes together advertise their GPUs times `replicas`."""
    return sum(allocatable.get(node, 0) for node in physical) == sum(physical.values()) * replicas


def peak_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals [start, end) open at one moment (an end and a start at the same instant
    do not overlap: the first pod had freed its GPU)."""
    events = sorted(edge for start, end in intervals for edge in ((start, 1), (end, -1)))
    # Ends (-1) sort before starts (+1) at the same instant.
    peak = running = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def check_overlap(intervals: Mapping[str, tuple[float, float]], pods: int, physical: int) -> Check:
    """All `pods` pods (of every node) ran at the same time, more than the nodes' `physical` GPUs."""
    missing = pods - len(intervals)
    peak = peak_overlap(intervals.values())
    if missing > 0:
        return GPU_SHARING_OVERLAP.failed(f"{missing} of {pods} pods have no run (start and end) to "
                                                   "compare: they did not run", measured=float(peak),
                            expected=float(pods))
    if peak <= physical:
        return GPU_SHARING_OVERLAP.failed(f"at most {peak} of the {pods} pods ran at the same time, no more "
                                                   f"than the nodes' {physical} GPUs: no GPU was shown to be shared "
                                                   "(pods that take turns on a GPU also succeed without sharing)",
                            measured=float(peak), expected=float(pods))
    if peak < pods:
        return GPU_SHARING_OVERLAP.failed(f"at most {peak} of the {pods} pods ran at the same time; all "
                                                   f"{pods} must hold their shared GPU at once",
                            measured=float(peak), expected=float(pods))
    return GPU_SHARING_OVERLAP.passed(f"all {pods} pods ran at the same time on {physical} GPU(s)",
                        measured=float(peak), expected=float(pods))


def check_uuids(reports: Mapping[str, GpuReport | None], physical: int, replicas: int) -> Check:
    """Each pod named its GPU; no more GPUs than the nodes have, none handed out more than
    `replicas` times, at least one handed out twice or more."""
    silent = sorted(pod for pod, report in reports.items() if report is None)
    if silent:
        return GPU_SHARING_UUIDS.failed(f"{len(silent)} pod(s) printed no `GPU-<uuid>, <compute mode>` "
                                                 f"line (nvidia-smi): {', '.join(silent[:5])}")
    uses = Counter(report.uuid for report in reports.values() if report is not None)
    if len(uses) > physical:
        return GPU_SHARING_UUIDS.failed(f"the pods name {len(uses)} different GPUs, more than the nodes' "
                                                 f"{physical}")
    over = {uuid: n for uuid, n in uses.items() if n > replicas}
    if over:
        return GPU_SHARING_UUIDS.failed("GPU(s) handed out more than the " f"{replicas} replicas: "
                            + ", ".join(f"{uuid} to {n} pods" for uuid, n in sorted(over.items())))
    if max(uses.values(), default=0) < 2:
        return GPU_SHARING_UUIDS.failed(f"every pod names a different GPU ({len(uses)}): none was shared")
    return GPU_SHARING_UUIDS.passed(f"{len(reports)} pods on {len(uses)} GPU(s): "
                        + ", ".join(f"{uuid} x{n}" for uuid, n in sorted(uses.items())))


def check_compute_mode(reports: Iterable[GpuReport], expected: str = EXCLUSIVE_PROCESS) -> Check:
    """Every pod's GPU is in the compute mode the MPS control daemon sets."""
    modes = Counter(report.compute_mode for report in reports)
    wrong = {mode: n for mode, n in modes.items() if mode != expected}
    if not modes:
        return GPU_SHARING_COMPUTE_MODE.failed("no pod reported its GPU's compute mode")
    if wrong:
        seen = ", ".join(f"{mode} ({n} pods)" for mode, n in sorted(wrong.items()))
        return GPU_SHARING_COMPUTE_MODE.failed(f"compute mode {seen}, "
                                                        f"expected {expected} (set by the MPS control daemon): "
                                                        "the GPUs are not shared through MPS")
    return GPU_SHARING_COMPUTE_MODE.passed(f"every GPU in compute mode {expected}")
