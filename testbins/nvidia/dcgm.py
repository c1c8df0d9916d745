"""TestDcgmDiagnostics (upstream's dcgm_test.go)."""

from __future__ import annotations

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
    if minutes < 2:
        raise TestFailure(f"--dcgmDiagTimeoutMinutes={minutes}: at least 2 (the Job's deadline sits a minute "
                          "inside the wait)")
    t.property("dcgm.level", level)
    job = launch(t, Workload("dcgm-diag", binary="/bin/bash", args=("-c", DCGM_SCRIPT), image=dcgm_image(t),
                             launcher="per-node", extra_env={"DCGM_DIAG_LEVEL": level, **DCGM_ENV},
                             capabilities=DCGM_CAPABILITIES, timeout=minutes * 60.0,
                             deadline_seconds=(minutes - 1) * 60))

    def diagnostic_passes() -> None:
        job.wait_succeeded()
        reports = [parse_report(log.node, read_lines(log.path)) for log in job.capture_logs()
                   if not log.previous and log.path.exists()]
        record_verdict(t, judge_dcgm(reports, job.placement.node_names, t.topology.gpus_per_node, level, test=t.name,
                                     strict=t.cfg.judge_strict))

    # the declared name: t.assessment puts --dcgmDiagLevel's value in it
    t.assessment("DCGM level-{dcgm_diag_level} diagnostic passes", diagnostic_passes)


