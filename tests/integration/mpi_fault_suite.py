"""A test binary for the MPIJob fault tests (test_mpi_launcher.py), run through kubetest2 like the
product's: the product's harness launches the product's MPIJob; only the workloads' arguments
differ, to make a fault happen (nanoGPT's `--fail-at-step`, or a run long enough to lose a worker).

    python tests/integration/mpi_fault_suite.py --test.run=TestRankExitsNonZero --test.v
"""

from __future__ import annotations

import sys

from harness.framework.context import TestContext
from harness.framework.suite import Suite
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.runner import main as run_suite

SUITE = Suite("mpi-faults", "MPIJob faults: a rank that exits non-zero, a worker pod deleted mid-run.")
# The rank --fail-rank (default 1) exits 17 before this step, on every launcher run (mpirun's ranks
# have no restart count: each run fails alike).
FAIL_AT_STEP = "3"


@SUITE.test("TestRankExitsNonZero")
def test_rank_exits_non_zero(t: TestContext) -> None:
    """nanoGPT whose rank 1 exits 17 before step 3: mpirun fails, the launcher is retried, the job fails."""
    job = launch(t, Workload("rank-fails", "workloads.nanogpt", ("--size", "tiny", "--fail-at-step", FAIL_AT_STEP),
                             launcher="mpi"))
    job.wait_succeeded()


@SUITE.test("TestLongTraining")
def test_long_training(t: TestContext) -> None:
    """nanoGPT training long enough for the pytest that runs this to delete a worker under it."""
    job = launch(t, Workload("long-training", "workloads.nanogpt", ("--size", "tiny", "--max-iters", "100000"),
                             launcher="mpi"))
    job.wait_succeeded()


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
