"""MPIJob failures on canned objects and real launcher logs (tests/fixtures/mpirun-*.log, captured
from the local cluster): mpirun's words, the failed rank, the lost worker, the launcher's retries,
and the conditions that judge them. The same faults run for real in tests/integration/suites/test_mpi_launcher.py."""

from __future__ import annotations

from pathlib import Path

from harness.cluster.conditions import any_pod_failed, mpi_worker_lost, pods_ended
from harness.cluster.logs import CapturedLog
from harness.cluster.watch import ClusterState
from harness.jobs.job_metrics import job_metrics
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.mpirun import explain_failure, launcher_runs, lost_worker_hosts, read_mpirun_log
from harness.jobs.workload import Placement, Workload
from harness.metrics.records import read_lines

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
ROLE = "training.kubeflow.org/job-role"


def pod(name: str, role: str, phase: str = "Running", node: str = "n1", exit_code: int | None = None,
        created: str = "2026-01-01T00:00:00Z", deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {ROLE: role},
            "creationTimestamp": created, "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    state = {"terminated": {"exitCode": exit_code, "reason": "Error"}} if exit_code is not None else {"running": {}}
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": phase, "containerStatuses": [{"name": role, "state": state}]}}


def captured(tmp_path: Path, pod_name: str, fixture: str) -> CapturedLog:
    path = tmp_path / f"{pod_name}.log"
    path.write_text(f"=== pod {pod_name} | node n0 | container launcher\n" + (FIXTURES / fixture).read_text())
    return CapturedLog(pod_name, "n0", "launcher", path, size=path.stat().st_size)


def test_a_failed_rank_is_read_from_mpiruns_summary_with_its_last_lines():
    parsed = read_mpirun_log(read_lines(FIXTURES / "mpirun-rank-exits.log"))
    assert (parsed.failed_rank, parsed.failed_code) == (1, 17)
    assert "injected failure before step 3" in parsed.rank_tails[1][-1]
    assert parsed.headlines[0] == "Primary job  terminated normally, but 1 process returned"
    assert not any("could not find environment variable" in w for w in parsed.words)
    assert sorted(parsed.rank_tails) == [0, 1]


def test_a_lost_worker_is_named_by_ssh_and_mpirun_with_its_hostfile_name():
    parsed = read_mpirun_log(read_lines(FIXTURES / "mpirun-worker-lost.log"))
    assert parsed.failed_rank is None
    assert parsed.headlines[:2] == [
        "Connection to long-training-worker-1.long-training.kt2t-3184b9b9-testlongtraining.svc closed by remote host.",
        "ORTE has lost communication with a remote daemon."]
    # The launcher's own host ("on node vm") is not a worker.
    assert lost_worker_hosts(parsed, ["long-training-worker-0", "long-training-worker-1"]) == [
        "long-training-worker-1"]


def test_the_failure_names_mpiruns_exit_code_the_rank_its_pod_and_node_and_the_retries(tmp_path: Path):
    pods = {p["metadata"]["name"]: p for p in [
        pod("j-launcher-a", "launcher", "Failed", "n0", 17, created="2026-01-01T00:00:00Z"),
        pod("j-launcher-b", "launcher", "Failed", "n1", 17, created="2026-01-01T00:00:30Z"),
        pod("j-worker-0", "worker", node="n0"), pod("j-worker-1", "worker", node="n1")]}
    logs = [captured(tmp_path, "j-launcher-b", "mpirun-rank-exits.log")]
    message = explain_failure("job j-launcher failed: BackoffLimitExceeded", pods, logs,
                              {0: ("j-worker-0", "n0"), 1: ("j-worker-1", "n1")})
    assert message is not None
    first, *detail = message.splitlines()
    assert first == ("job j-launcher failed: BackoffLimitExceeded; mpirun in launcher pod j-launcher-b on node n1 "
                     "exited with code 17: rank 1 (pod j-worker-1, node n1) exited first, with code 17; "
                     "the launcher ran 2 times (2 failed; its Job retried it)")
    assert "    Exit code:    17" in detail
    assert detail[-1].startswith("[1,1]<stderr>:rank 1: injected failure")


def test_a_lost_worker_without_a_rank_summary_is_named_with_its_node(tmp_path: Path):
    pods = {p["metadata"]["name"]: p for p in [
        pod("l-launcher-a", "launcher", "Failed", "n1", 205),
        pod("long-training-worker-1", "worker", node="n7"), pod("long-training-worker-0", "worker", node="n0")]}
    logs = [captured(tmp_path, "l-launcher-a", "mpirun-worker-lost.log")]
    message = explain_failure("worker pod long-training-worker-1 on node n7 was deleted while the job ran", pods,
                              logs, {})
    assert message is not None
    assert message.splitlines()[0] == (
        "worker pod long-training-worker-1 on node n7 was deleted while the job ran; mpirun in launcher pod "
        "l-launcher-a on node n1 exited with code 205: lost worker long-training-worker-1 (node n7): Connection to "
        "long-training-worker-1.long-training.kt2t-3184b9b9-testlongtraining.svc closed by remote host.")


def test_no_launcher_no_explanation(tmp_path: Path):
    assert explain_failure("x", {"w": pod("w", "worker")}, [], {}) is None


def test_launcher_runs_count_each_pod_and_the_failed_ones():
    pods = [pod("a", "launcher", "Failed", exit_code=1), pod("b", "launcher", "Succeeded", exit_code=0),
            pod("w", "worker")]
    assert launcher_runs(pods) == (2, 1)


def state_of(*pods: dict) -> ClusterState:
    state = ClusterState()
    state.replace_all("Pod", list(pods))
    return state


def test_a_failed_launcher_is_a_retry_but_a_failed_worker_fails_the_job():
    mpi = LAUNCHERS["mpi"]
    cond = any_pod_failed("ns", "x=y", 60.0, mpi.retried)
    assert cond.check(state_of(pod("j-launcher-a", "launcher", "Failed", exit_code=17)), 0.0) is None
    reason = cond.check(state_of(pod("j-worker-1", "worker", "Failed", exit_code=255)), 0.0)
    assert reason == "pod j-worker-1 on node n1 failed: container worker exited with code 255 (Error)"


def test_a_worker_deleted_or_gone_is_lost_naming_pod_and_node():
    cond = mpi_worker_lost("ns", "x=y")
    state = state_of(pod("j-worker-0", "worker", node="n0"), pod("j-worker-1", "worker", node="n1"),
                     pod("j-launcher-a", "launcher"))
    assert cond.check(state, 0.0) is None
    state.update("Pod", "DELETED", pod("j-launcher-a", "launcher"))  # not a worker: the Job's business
    assert cond.check(state, 0.0) is None
    state.update("Pod", "MODIFIED", pod("j-worker-1", "worker", node="n1", deleting=True))
    assert cond.check(state, 0.0) == "worker pod j-worker-1 on node n1 was deleted while the job ran"
    assert cond.blame(state, 0.0) == "j-worker-1"
    gone = mpi_worker_lost("ns", "x=y")
    state = state_of(pod("j-worker-0", "worker", node="n0"))
    assert gone.check(state, 0.0) is None
    state.update("Pod", "DELETED", pod("j-worker-0", "worker", node="n0"))  # deleted with no grace
    assert gone.check(state, 0.0) == "worker pod j-worker-0 on node n0 was deleted while the job ran"


def test_after_a_workers_loss_the_running_launcher_is_awaited_for_its_words():
    mpi = LAUNCHERS["mpi"]
    workload = Workload("j", "workloads.nanogpt", launcher="mpi")
    where = Placement("ns", {}, {}, {}, "t", ("n0", "n1"), 1, 0, "cpu", "img", 60.0)
    pods = {"j-launcher-a": pod("j-launcher-a", "launcher"), "j-worker-1": pod("j-worker-1", "worker")}
    assert mpi.awaited_after_failure(workload, where, "j-launcher-a", pods) is None
    settle = mpi.awaited_after_failure(workload, where, "j-worker-1", pods)
    assert settle is not None and settle.name == "pods j-launcher-a to end"
    assert settle.check(state_of(pods["j-launcher-a"]), 0.0) is None
    assert settle.check(state_of(pod("j-launcher-a", "launcher", "Failed", exit_code=1)), 0.0) is not None
    assert pods_ended("ns", "x=y", []).check(state_of(), 0.0) is not None


def test_mpi_ranks_are_placed_by_slot_over_the_hostname_they_report(tmp_path: Path):
    path = tmp_path / "l.log"
    path.write_text("=== pod l\n" + "".join(
        f'[1,{r}]<stdout>:KT2T_METRICS {{"workload":"bert","rank":{r},"node":"j-worker-{r}","loss_first":5}}\n'
        for r in range(2)))
    logs = [CapturedLog("l", "n9", "launcher", path)]
    locations = {0: ("j-worker-0", "n0"), 1: ("j-worker-1", "n1")}
    placed = job_metrics(logs, locations, locations_win=True)
    assert sorted((r.rank, r.pod, r.node) for r in placed.ranks) == [(0, "j-worker-0", "n0"), (1, "j-worker-1", "n1")]
    reported = job_metrics(logs, locations)
    assert sorted(r.node for r in reported.ranks) == ["j-worker-0", "j-worker-1"]  # what each rank said


def test_a_rank_killed_by_a_signal_is_read_from_mpiruns_notice():
    lines = ["[1,0]<stdout>:step 1", "[1,1]<stderr>:about to be killed", "-" * 74,
             "mpirun noticed that process rank 1 with PID 0 on node j-worker-1.j.ns.svc exited on signal 9 (Killed).",
             "-" * 74]
    parsed = read_mpirun_log(lines)
    assert (parsed.failed_rank, parsed.failed_signal, parsed.failed_code) == (1, 9, None)
    assert parsed.headlines == [lines[3]]
    assert lost_worker_hosts(parsed, ["j-worker-1"]) == ["j-worker-1"]
