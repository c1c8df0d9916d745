"""The GPU-sharing assessment (TestTimeSlicing, TestMps: upstream's opt-in --timeSlicingEnabled, #813,
and --mpsEnabled, #817), the one flow both tests run, as `assess` is the training tests':

the NVIDIA device plugin (the run's, or one present before it) is replaced by one sharing each GPU
`replicas` times (harness/setup/gpu_sharing.py: set up, and restored on every path); every node of
the type is filled with pods of one GPU each, all at once (manifests/scripts/gpu-sharing-workload.sh:
each prints its GPU's UUID and compute mode, then holds the GPU SHARING_HOLD_SECONDS); and
harness/verdict/gpu_sharing.py judges what the nodes advertise, the overlap, the GPUs the pods
name and (MPS) the compute mode, each in the feature's assessment of that name (--assess selects
them one by one). The checks judged are recorded as one verdict, as every assessment's is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from harness.cluster.manifests import script_text
from harness.cluster.pods import run_interval
from harness.cluster.resources import NODE
from harness.cluster.wait import wait_for
from harness.config.settings import Config
from harness.errors import HarnessError, TestFailure, WaitTimeout
from harness.framework.context import TestContext
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from harness.setup.gpu_sharing import MPS, TIME_SLICING, GpuSharing, SharingMode, advertised, nodes_advertise
from harness.verdict.checks import Status, Verdict, beyond_upstream
from harness.verdict.gpu_sharing import (
    GpuReport,
    advertised_in_sum,
    check_advertised,
    check_compute_mode,
    check_overlap,
    check_uuids,
    peak_overlap,
)
from harness.verdict.gpu_sharing import parse_report as parse_gpu_report

# How long each pod holds its GPU: long enough that all of a node's pods run at once (the Job
# controller starts them in batches).
SHARING_HOLD_SECONDS = 30
SHARING_SCRIPT = script_text("gpu-sharing-workload.sh")
# upstream's flags, one per mode.
SHARING_FLAGS = {TIME_SLICING.name: "--timeSlicingEnabled", MPS.name: "--mpsEnabled"}


def sharing_enabled(cfg: Config, mode: SharingMode) -> bool:
    return cfg.mps_enabled if mode.mps else cfg.time_slicing_enabled


def sharing_replicas(cfg: Config, mode: SharingMode) -> int:
    """--mpsReplicas / --timeSlicingReplicas (upstream's), else GPU_SHARING_REPLICAS."""
    own = cfg.mps_replicas if mode.mps else cfg.time_slicing_replicas
    return own if own is not None else cfg.gpu_sharing_replicas


def require_sharing(t: TestContext, mode: SharingMode) -> None:
    """Skipped unless the mode's flag is set and the run installs the device plugin; failed on an
    accelerator other than NVIDIA's."""
    flag = SHARING_FLAGS[mode.name]
    if not sharing_enabled(t.cfg, mode):
        t.skip(f"skipping GPU sharing ({mode.name}); set {flag} to run (it replaces the NVIDIA device plugin this "
               "run installs, cluster-wide, for the test's duration)")
    if not t.cfg.install_device_plugin:
        # upstream's: the plugin to reconfigure must be one the suite deploys (EKS Auto ships its own).
        t.skip(f"skipping {mode.name}; requires --installDevicePlugin so the plugin under reconfiguration is one "
               "this suite owns")
    if t.cfg.accelerator != "nvidia":
        raise TestFailure(f"{flag} needs ACCELERATOR=nvidia (got ACCELERATOR={t.cfg.accelerator}): the test "
                          "reconfigures the NVIDIA device plugin")


def sharing_assessments(t: TestContext, mode: SharingMode) -> tuple[str, str, str | None]:
    """The feature's declared assessments, in their order: what the nodes advertise, the
    oversubscribed pods' overlap (and the GPUs they name), and with MPS the compute mode."""
    names = t.feature.assessments if t.feature is not None else ()
    if len(names) != (3 if mode.mps else 2):
        raise HarnessError(f"{t.name}: {mode.name} declares the assessments {names}: expected what the nodes "
                           "advertise, the overlap" + (" and the compute mode" if mode.mps else ""))
    return names[0], names[1], names[2] if mode.mps else None


@dataclass(frozen=True)
class SharedPods:
    """What the oversubscribed pods did: each pod's report (None: no log), their running intervals."""

    reports: dict[str, GpuReport | None]
    intervals: dict[str, tuple[float, float]]

    @property
    def seen(self) -> list[GpuReport]:
        return [report for report in self.reports.values() if report is not None]


def share_and_assess(t: TestContext, mode: SharingMode) -> None:
    """One sharing mode's test (the module docstring), skipped or failed first by require_sharing.
    Setup: the plugin shares the GPUs, the nodes are waited for, the pods launched; each declared
    assessment (t.assessment: --assess selects them one by one) judges its checks, and the checks
    judged are recorded together at the end, as one verdict (a failure of what the nodes advertise
    is recorded at once, before the pods are launched)."""
    require_sharing(t, mode)
    advertises, oversubscribed, compute_mode = sharing_assessments(t, mode)
    pod_image = image(t, "nccl_tests_image")  # before the device plugin is reconfigured
    replicas = sharing_replicas(t.cfg, mode)
    physical = {node.name: node.gpus for node in t.topology.nodes}
    t.property("gpu_sharing.mode", mode.name)
    t.property("gpu_sharing.replicas", replicas)
    sharing = GpuSharing(t.session, mode, replicas, t.topology.node_names, physical=physical)
    # Registered before the workload's teardown, so it runs after it (the workload is drained first).
    t.cleanup(sharing.restore, f"restore the stock NVIDIA device plugin ({mode.name})")
    sharing.share()
    allocatable = wait_advertised(t, physical, replicas)
    verdict = Verdict()

    def advertised_judged() -> None:
        check = check_advertised(allocatable, physical, replicas)
        if check.status is Status.FAIL and physical and advertised_in_sum(allocatable, physical, replicas):
            # upstream compares the sum: nodes that make it up unevenly pass there
            check = beyond_upstream([check], t.name, t.cfg.judge_strict)[0]
        verdict.add(check)
        if verdict.failures:
            record_verdict(t, verdict)

    t.assessment(advertises, advertised_judged)
    # upstream's count: every node of the type, each filled with its shared GPUs' worth of pods.
    per_node = t.topology.gpus_per_node * replicas
    pods, gpus = per_node * len(physical), sum(physical.values())
    job = launch(t, Workload(f"gpu-sharing-{mode.name}", binary="sh", args=("-c", SHARING_SCRIPT),
                             image=pod_image, launcher="shared-gpu", pods=per_node,
                             extra_env={"SHARING_HOLD_SECONDS": str(SHARING_HOLD_SECONDS)}))
    sharing.workload = (job.namespace, job.selector)

    @cache
    def ran() -> SharedPods:
        """The pods waited for and read once, by the first assessment that judges them."""
        job.wait_succeeded()
        logs = [entry for entry in job.capture_logs() if not entry.previous]
        shared = SharedPods(
            {entry.pod: parse_gpu_report(entry.pod, entry.node, read_lines(entry.path)) if entry.path.exists()
             else None for entry in logs},
            {name: span for name, pod in job.pods_seen.items() if (span := run_interval(pod)) is not None})
        t.property("gpu_sharing.pods", pods)
        t.property("gpu_sharing.peak_running", peak_overlap(shared.intervals.values()))
        t.property("gpu_sharing.uuids", ",".join(sorted({r.uuid for r in shared.seen})))
        t.property("gpu_sharing.compute_modes", ",".join(sorted({r.compute_mode for r in shared.seen})))
        return shared

    t.assessment(oversubscribed, lambda: verdict.add([check_overlap(ran().intervals, pods, gpus),
                                                      check_uuids(ran().reports, gpus, replicas)]))
    if compute_mode is not None:
        t.assessment(compute_mode, lambda: verdict.add(check_compute_mode(ran().seen)))
    if verdict.checks:
        record_verdict(t, verdict)


def wait_advertised(t: TestContext, physical: dict[str, int], replicas: int) -> dict[str, int]:
    """Every node advertising its GPUs times `replicas`, waited for within DISCOVERY_TIMEOUT (a
    timeout is logged: the assessment judges what the nodes advertise then); what they advertise."""
    expected = {node: count * replicas for node, count in physical.items()}
    try:
        wait_for(t.cluster, nodes_advertise(expected), timeout=t.cfg.discovery_timeout, cancel=t.cancel)
    except WaitTimeout as exc:
        t.logf("%s", exc)
    allocatable = advertised(t.cluster.list(NODE).get("items", []))
    for node in physical:
        t.property(f"node.{node}.gpus_advertised", allocatable.get(node, 0))
    return allocatable
