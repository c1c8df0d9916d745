"""TestDcgmDiagnostics (upstream's dcgm_test.go), and upstream's tests of its Job deadline
(dcgm_deadline_test.go: TestDcgmDiagDeadlineSeconds, TestDcgmDiagDeadlineAlwaysPositive), which
upstream's nvidia.test lists among its tests and here judge this project's deadline."""

from __future__ import annotations

from collections.abc import Callable

from harness.cluster.manifests import script_text
from harness.config.settings import DCGM_IMAGE as NVIDIA_DCGM_IMAGE
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image, is_project_image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from harness.verdict.dcgm import EXIT_PREFIX as DCGM_EXIT_PREFIX
from harness.verdict.dcgm import judge_dcgm, parse_report
from testbins.nvidia.common import require_gpus

# nv-hostengine then dcgmi with the per-SKU config (manifests/scripts/dcgm-diag.sh); the config,
# upstream's per-SKU overrides (#806), is manifests/scripts/dcgm-diag.yaml, given to the script in
# its environment (the image has no copy of this project's files).
DCGM_SCRIPT = script_text("dcgm-diag.sh")
# What the script reads besides DCGM_DIAG_LEVEL.
DCGM_ENV = {"DCGM_DIAG_CONFIG": script_text("dcgm-diag.yaml"), "DCGM_EXIT_PREFIX": DCGM_EXIT_PREFIX}
# DCGM's diagnostics read the GPUs' profiling counters and set clocks and power limits for the
# stress tests: NVIDIA runs its DCGM containers with SYS_ADMIN.
DCGM_CAPABILITIES = ("SYS_ADMIN",)


# upstream's dcgm_deadline.go: the Job's own deadline sits a minute inside the wait, so a hung run fails
# as the Job, its logs attached, before the wait times out; below 2 minutes no positive deadline is left.
DEADLINE_SLACK_SECONDS = 60
MIN_TIMEOUT_MINUTES = 2
# upstream's TestDcgmDiagDeadlineSeconds cases (Go's subtest names: spaces as underscores): minutes, the
# deadline wanted (None: an error).
DEADLINE_CASES: tuple[tuple[str, int, int | None], ...] = (
    ("zero_is_rejected", 0, None),
    ("negative_is_rejected", -5, None),
    ("one_minute_would_render_zero,_so_is_rejected", 1, None),
    ("two_minutes_is_the_smallest_accepted", 2, 60),
    ("the_default", 180, 10740),
)


def deadline_seconds(timeout_minutes: int) -> int:
    """upstream's dcgmDiagDeadlineSeconds: the Job's activeDeadlineSeconds for a wait of `timeout_minutes`;
    ValueError below MIN_TIMEOUT_MINUTES (Kubernetes rejects a deadline that is not positive)."""
    if timeout_minutes < MIN_TIMEOUT_MINUTES:
        raise ValueError(f"dcgmDiagTimeoutMinutes must be at least {MIN_TIMEOUT_MINUTES}, got {timeout_minutes}")
    return timeout_minutes * 60 - DEADLINE_SLACK_SECONDS


def deadline_case(minutes: int, want: int | None) -> Callable[[TestContext], None]:
    """One case of upstream's TestDcgmDiagDeadlineSeconds, with its messages."""

    def run(t: TestContext) -> None:
        try:
            got = deadline_seconds(minutes)
        except ValueError as exc:
            if want is not None:
                raise TestFailure(f"dcgmDiagDeadlineSeconds({minutes}) returned unexpected error: {exc}") from exc
            return
        if want is None:
            raise TestFailure(f"dcgmDiagDeadlineSeconds({minutes}) = {got}, want an error")
        if got != want:
            raise TestFailure(f"dcgmDiagDeadlineSeconds({minutes}) = {got}, want {want}")

    # what the catalogue (docs/TESTS.md) says of the case
    run.__doc__ = f"`--dcgmDiagTimeoutMinutes={minutes}`: " + (
        "rejected (an error)" if want is None else f"an `activeDeadlineSeconds` of {want}")
    return run


def test_deadline_always_positive(t: TestContext) -> None:
    """upstream's TestDcgmDiagDeadlineAlwaysPositive: every timeout the bound admits, up to 600 minutes,
    renders a deadline Kubernetes accepts."""
    for minutes in range(MIN_TIMEOUT_MINUTES, 601):
        try:
            got = deadline_seconds(minutes)
        except ValueError as exc:
            raise TestFailure(f"dcgmDiagDeadlineSeconds({minutes}) rejected a value inside the accepted range: "
                              f"{exc}") from exc
        if got <= 0:
            raise TestFailure(f"dcgmDiagDeadlineSeconds({minutes}) = {got}, must be positive")


def dcgm_image(t: TestContext) -> str:
    """upstream's: --nvidiaTestImage (its image has DCGM and the per-SKU config). DCGM_IMAGE, when set,
    wins; this project's nccl-tests image has no DCGM (images/README.md), so NVIDIA's DCGM image
    stands in for it."""
    if t.cfg.dcgm_image:
        return image(t, "dcgm_image")
    test_image = image(t, "nccl_tests_image")
    return NVIDIA_DCGM_IMAGE if is_project_image(test_image) else test_image


def test_dcgm_diagnostics(t: TestContext) -> None:
    """upstream's opt-in deep DCGM diagnostic (`dcgmi diag -r <level> -c <per-SKU config>`, up to hours):
    skipped unless --dcgmDiagEnabled, as upstream's. Runs on every node (a per-node Job with all its
    GPUs, in --nvidiaTestImage as upstream's); a node whose dcgmi exited non-zero fails, named with
    the test, the GPU and DCGM's warning from its JSON report; the report's other failures decide
    with JUDGE_STRICT (harness/verdict/dcgm.py)."""
    if not t.cfg.dcgm_diag_enabled:
        t.skip("skipping deep DCGM diagnostics; set --dcgmDiagEnabled to run (long-running, not suitable for a "
               "per-build gate)")
    require_gpus(t)
    minutes, level = t.cfg.dcgm_diag_timeout_minutes, t.cfg.dcgm_diag_level
    try:
        deadline = deadline_seconds(minutes)
    except ValueError as exc:
        raise TestFailure(f"--dcgmDiagTimeoutMinutes={minutes}: {exc} (the Job's deadline sits a minute inside "
                          "the wait)") from exc
    t.property("dcgm.level", level)
    job = launch(t, Workload("dcgm-diag", binary="/bin/bash", args=("-c", DCGM_SCRIPT), image=dcgm_image(t),
                             launcher="per-node", extra_env={"DCGM_DIAG_LEVEL": level, **DCGM_ENV},
                             capabilities=DCGM_CAPABILITIES, timeout=minutes * 60.0,
                             deadline_seconds=deadline))

    def diagnostic_passes() -> None:
        job.wait_succeeded()
        reports = [parse_report(log.node, read_lines(log.path)) for log in job.capture_logs()
                   if not log.previous and log.path.exists()]
        record_verdict(t, judge_dcgm(reports, job.placement.node_names, t.topology.gpus_per_node, level, test=t.name,
                                     strict=t.cfg.judge_strict))

    # the declared name: t.assessment puts --dcgmDiagLevel's value in it
    t.assessment("DCGM level-{dcgm_diag_level} diagnostic passes", diagnostic_passes)


