"""TestTimeSlicing and TestMps (upstream's gpu_sharing_test.go, time_slicing_test.go, mps_test.go):
each runs harness/jobs/gpu_sharing.py's flow for its mode, skipped unless its flag is set."""

from __future__ import annotations

from harness.framework.context import TestContext
from harness.framework.suite import TestFunc
from harness.jobs.gpu_sharing import share_and_assess
from harness.setup.gpu_sharing import SharingMode


def gpu_sharing(mode: SharingMode) -> TestFunc:
    """One sharing mode's test (harness/jobs/gpu_sharing.py); skipped unless its flag is set."""

    def run(t: TestContext) -> None:
        share_and_assess(t, mode)

    return run
