"""LAUNCHER=mpi for real, through the real kubetest2: the product's MPIJob (mpi-operator, mpirun in
the launcher, the workers' sshd played by the local cluster's stand-in: hack/README.md, "MPIJob
pods") trains on 2 CPU nodes, its launcher's `--tag-output` log parsed per rank; and its faults: a
rank that exits non-zero, a worker pod deleted mid-run.

The faults run `mpi_fault_suite.py`, a test binary built from the product's harness whose only
difference is the workloads' arguments (nanoGPT's `--fail-at-step`, a run long enough to lose a
worker in).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import junitparser
import pytest

from ..conftest import LocalCluster, wait_for
from ..kubetest2_runs import (
    MPI_RUN,
    MPI_TRAININGS,
    VENV_BIN,
    case_properties,
    junit_cases,
    kubetest2,
    kubetest2_command,
    run_as_service_account,
)

pytestmark = [pytest.mark.integration, pytest.mark.workloads]

FAULT_SUITE = Path(__file__).resolve().parents[1] / "mpi_fault_suite.py"
# BERT (upstream's MPIJob workload) in every pass, the other two in the full tier (kubetest2_runs.py).
TRAININGS = MPI_TRAININGS
NODES = {"kwok-cpu-0", "kwok-cpu-1"}
MPIRUN_LOST_A_WORKER = ("ORTE has lost communication with a remote daemon",
                        "ORTE was unable to reliably start one or more daemons", "closed by remote host")


def assert_every_rank_placed_on_its_worker(artifacts: Path, test: str, job: str, props: dict[str, str],
                                           world_size: int = 2) -> None:
    """rank.N.* for every N below the world size, from the launcher's tagged lines, each rank on the
    worker pod -map-by slot puts it on (1 slot per worker here) and that pod's node."""
    assert props["metrics.ranks"] == str(world_size), props
    logs = artifacts / test / "logs"
    for rank in range(world_size):
        worker = f"{job}-worker-{rank}"
        header = (logs / f"{worker}.log").read_text().splitlines()[0]
        assert props[f"rank.{rank}.pod"] == worker
        assert f"| node {props[f'rank.{rank}.node']} |" in header, (header, props)
    assert {props[f"rank.{rank}.node"] for rank in range(world_size)} == NODES  # one worker per node
    (launcher_log,) = logs.glob(f"{job}-launcher-*.log")
    tagged = launcher_log.read_text()
    assert all(f"[1,{rank}]<stdout>:KT2T_METRICS " in tagged for rank in range(world_size))
    assert (props["launcher.runs"], props["launcher.failed"]) == ("1", "0")


def test_training_suite_trains_for_real_through_mpirun(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory):
    # The run is shared (as the ServiceAccount, once a session): test_reliability.py judges its RBAC.
    run = run_as_service_account(cluster, tmp_path_factory, MPI_RUN)
    artifacts, done = run.artifacts, run.done
    assert done.returncode == 0, done.stdout + done.stderr
    cases = junit_cases(artifacts, "e2e-nvidia-training")
    for test, job in TRAININGS.items():
        assert cases[test].is_passed, cases[test].result
        props = case_properties(cases[test])
        assert_every_rank_placed_on_its_worker(artifacts / "e2e-nvidia-training", test, job, props)
        for rank in range(2):
            assert float(props[f"rank.{rank}.loss_last"]) < float(props[f"rank.{rank}.loss_first"]), props
            assert props[f"rank.{rank}.launcher"] == "openmpi"
        mpijob = (artifacts / "e2e-nvidia-training" / test / "manifests" / "mpijob.yaml").read_text()
        assert "kind: MPIJob" in mpijob and "--tag-output" in mpijob
    (skipped,) = cases["TestElasticRecovery"].result
    assert isinstance(skipped, junitparser.Skipped) and "torchrun" in skipped.message


def test_allreduce_runs_over_gloo_launched_by_mpirun(cluster: LocalCluster, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia", "--test.v", "--test.run=^TestNCCLAllReduce$",
                     env={"LAUNCHER": "mpi"}, canned=False)
    assert done.returncode == 0, done.stdout + done.stderr
    case = junit_cases(artifacts, "e2e-nvidia")["TestNCCLAllReduce"]
    props = case_properties(case)
    assert_every_rank_placed_on_its_worker(artifacts / "e2e-nvidia", "TestNCCLAllReduce", "nccl-allreduce", props)
    assert float(props["rank.1.busbw_avg"]) > 0


def fault_suite(namespace: str, test: str) -> tuple[str, ...]:
    """kubetest2 exec's arguments to run one test of mpi_fault_suite.py in `namespace` (the test's
    own: the harness leaves it in place, and conftest's diagnostics read it on failure)."""
    return ("exec", str(VENV_BIN / "python"), str(FAULT_SUITE), "--test.v", f"--test.run=^{test}$",
            f"--namespace={namespace}")


def test_a_rank_that_exits_non_zero_fails_with_mpiruns_code_its_last_lines_and_the_retries(
        cluster: LocalCluster, namespace: str, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    done = kubetest2(cluster, artifacts, *fault_suite(namespace, "TestRankExitsNonZero"), canned=False, timeout=240)
    assert done.returncode != 0, done.stdout
    case = junit_cases(artifacts, "mpi-faults")["TestRankExitsNonZero"]
    (failure,) = case.result
    assert isinstance(failure, junitparser.Failure)
    # nanoGPT's rank 1 exits 17 before step 3 on every run; mpirun exits with that code.
    assert "mpirun in launcher pod rank-fails-launcher-" in failure.message
    assert "exited with code 17: rank 1 (pod rank-fails-worker-1, node kwok-cpu-" in failure.message
    assert "the launcher ran 2 times (2 failed" in failure.message  # backoffLimit 1: retried once, not hidden
    assert "[1,1]<stderr>:rank 1: injected failure before step 3" in failure.text
    props = case_properties(case)
    assert (props["launcher.runs"], props["launcher.failed"]) == ("2", "2")
    assert "the launcher ran 2 time(s), 2 failed" in case.system_out
    assert len(list((artifacts / "mpi-faults" / "TestRankExitsNonZero" / "logs").glob("rank-fails-launcher-*"))) == 2


def test_a_worker_deleted_mid_run_fails_within_seconds_naming_it_its_node_and_mpiruns_error(
        cluster: LocalCluster, namespace: str, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    command = kubetest2_command(cluster, artifacts, *fault_suite(namespace, "TestLongTraining"), canned=False)
    with subprocess.Popen(command.args, env=command.env, cwd=command.cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as run:
        try:
            launcher = wait_for(lambda: training_launcher(cluster, namespace), 120, "both ranks training")
            victim = cluster.core.read_namespaced_pod("long-training-worker-1", namespace)
            cluster.core.delete_namespaced_pod(victim.metadata.name, namespace, grace_period_seconds=1)
            deleted_at = time.monotonic()
            output, _ = run.communicate(timeout=120)
            seconds = time.monotonic() - deleted_at
        finally:
            if run.poll() is None:  # the training would go on: kubetest2 forwards SIGTERM to the harness
                run.terminate()
    assert run.returncode != 0, output
    case = junit_cases(artifacts, "mpi-faults")["TestLongTraining"]
    (failure,) = case.result
    assert failure.message.startswith(f"worker pod long-training-worker-1 on node {victim.spec.node_name} was "
                                      "deleted while the job ran; mpirun in launcher pod long-training-launcher-")
    assert launcher in failure.message, failure.message
    assert any(words in failure.text for words in MPIRUN_LOST_A_WORKER), failure.text
    assert f"long-training-worker-1.long-training.{namespace}.svc" in failure.text  # the host mpirun lost
    # Within seconds of the deletion, to the end of the kubetest2 run (JUnit and teardown included).
    assert seconds < 20, f"the run ended {seconds:.1f}s after the deletion"  # 1.5-1.7 s measured


def training_launcher(cluster: LocalCluster, namespace: str) -> str | None:
    """The launcher pod once rank 0 has stepped a few times (rank 1 steps with it: DDP)."""
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-role=launcher").items
    running = [p for p in pods if p.status.phase == "Running"]
    if not running:
        return None  # (kwok may not serve a log before the container starts: 400)
    name = running[0].metadata.name
    return name if "[1,0]<stdout>:iter 5:" in cluster.core.read_namespaced_pod_log(name, namespace) else None
