"""MPIJobs that run for real on the local cluster: mpi-operator creates the launcher and the workers,
mpirun (OpenMPI) in the launcher starts its ranks in the worker pods through the node agent's ssh
stand-in (hack/README.md, "MPIJob pods").

The jobs have upstream's shape (bert-training.yaml: slotsPerWorker, `mpirun --allow-run-as-root
--tag-output -np N -bind-to none -map-by slot -x ...`, workers running `/usr/sbin/sshd -De`),
2 workers on 2 nodes; each rank runs the all-reduce workload over gloo at its tiny size.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes import client

from ..conftest import LocalCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.workloads]

IMAGE = "registry.invalid/stood-in-for:1"
ROLE = "training.kubeflow.org/job-role"
JOB_NAME = "training.kubeflow.org/job-name"
FORWARDED = ["PATH", "MASTER_ADDR", "MASTER_PORT", "NUM_GPUS_PER_NODE", "PYTHONUNBUFFERED"]
# Each rank says where it runs (its host name, folder and session id), then trains.
WHERE = "echo where rank=$OMPI_COMM_WORLD_RANK host=$(uname -n) cwd=$(pwd -P) sid=$(cut -d' ' -f6 /proc/self/stat)"
ALL_REDUCE = f"{WHERE}; exec python -m workloads.allreduce --size tiny"
MPIRUN_LOST_A_DAEMON = ("ORTE has lost communication with a remote daemon",
                        "ORTE was unable to reliably start one or more daemons")
MPIRUN_RANK_FAILED = ("Primary job  terminated normally, but 1 process returned",
                      "mpirun detected that one or more processes exited with non-zero status")
TAGGED = re.compile(r"^\[1,(\d+)\]<(stdout|stderr)>:(.*)$")


def mpirun(np: int, program: str) -> list[str]:
    forwarded = [arg for name in FORWARDED for arg in ("-x", name)]
    return ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(np), "-bind-to", "none",
            "-map-by", "slot", *forwarded, "sh", "-c", program]


def mpijob(name: str, slots: int, program: str, backoff_limit: int = 0, wait_for_workers: bool = False,
           workers: int = 2) -> dict[str, Any]:
    """An MPIJob like upstream's bert-training.yaml, its workers on distinct nodes."""
    env = [{"name": "MASTER_ADDR", "value": f"{name}-worker-0.{name}"}, {"name": "MASTER_PORT", "value": "29500"},
           {"name": "NUM_GPUS_PER_NODE", "value": "0"}, {"name": "PYTHONUNBUFFERED", "value": "1"}]
    worker_labels = {JOB_NAME: name, ROLE: "worker"}
    spread = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": worker_labels}, "topologyKey": "kubernetes.io/hostname"}]}}
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": backoff_limit},
            **({"launcherCreationPolicy": "WaitForWorkersReady"} if wait_for_workers else {}),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [{
                    "name": "launcher", "image": IMAGE, "command": mpirun(workers * slots, program), "env": env}]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"affinity": spread, "containers": [{
                    "name": "worker", "image": IMAGE, "command": ["/usr/sbin/sshd", "-De"]}]}}},
            },
        },
    }


def create(cluster: LocalCluster, namespace: str, job: dict[str, Any]) -> None:
    cluster.custom.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", job)


def mpijob_condition(cluster: LocalCluster, namespace: str, name: str, kinds: tuple[str, ...],
                     timeout_s: float) -> dict[str, Any]:
    """Waits for one of the MPIJob's conditions to be True; returns the MPIJob."""
    def reached() -> dict[str, Any] | None:
        job = cluster.custom.get_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", name)
        conditions = job.get("status", {}).get("conditions", [])
        return job if any(c["type"] in kinds and c["status"] == "True" for c in conditions) else None

    return wait_for(reached, timeout_s, f"MPIJob {name} to reach {' or '.join(kinds)}", interval_s=0.5)


def pods_of(cluster: LocalCluster, namespace: str, name: str, role: str) -> list[client.V1Pod]:
    pods = cluster.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME}={name},{ROLE}={role}").items
    return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def by_rank(log: str) -> dict[int, list[str]]:
    """mpirun's `--tag-output` lines, by rank."""
    ranks: dict[int, list[str]] = {}
    for line in log.splitlines():
        match = TAGGED.match(line)
        if match:
            ranks.setdefault(int(match.group(1)), []).append(match.group(3))
    return ranks


def where(lines: list[str]) -> dict[str, str]:
    (line,) = [text for text in lines if text.startswith("where ")]
    return dict(field.split("=", 1) for field in line.split()[1:])


def metrics(lines: list[str]) -> dict[str, Any]:
    (line,) = [text for text in lines if text.startswith("KT2T_METRICS ")]
    return dict(json.loads(line.removeprefix("KT2T_METRICS ")))


# Two ranks per worker in every pass (-map-by slot across workers and within one); one per worker: full tier.
@pytest.mark.parametrize("slots", [pytest.param(1, marks=pytest.mark.full), 2])
def test_mpijob_trains_through_mpirun_in_the_worker_pods(cluster: LocalCluster, namespace: str, slots: int):
    name = f"ar-{slots}slot"
    create(cluster, namespace, mpijob(name, slots, ALL_REDUCE, backoff_limit=3))
    mpijob_condition(cluster, namespace, name, ("Succeeded", "Failed"), 150)
    launcher = pods_of(cluster, namespace, name, "launcher")[-1]
    assert launcher.status.phase == "Succeeded", launcher.status
    ranks = by_rank(cluster.core.read_namespaced_pod_log(launcher.metadata.name, namespace))
    world = 2 * slots
    assert sorted(ranks) == list(range(world))
    workers = pods_of(cluster, namespace, name, "worker")
    assert len({w.spec.node_name for w in workers}) == 2
    for rank, lines in ranks.items():
        # -map-by slot: ranks [i*slots, (i+1)*slots) on worker i.
        worker = next(w for w in workers if w.metadata.name == f"{name}-worker-{rank // slots}")
        seen = where(lines)
        # The rank ran inside the worker pod: its hostname, its scratch folder, its container's session.
        assert seen["host"] == worker.metadata.name
        assert seen["cwd"].endswith(f"/{namespace}_{worker.metadata.name}_{worker.metadata.uid}")
        assert f"kt2t-local://{seen['sid']}" == worker.status.container_statuses[0].container_id
        report = metrics(lines)
        assert (report["rank"], report["world_size"], report["local_rank"]) == (rank, world, rank % slots)
        assert (report["launcher"], report["backend"], report["node"]) == ("openmpi", "gloo", worker.metadata.name)
    # mpirun reached each worker through the ssh stand-in: the worker's log says so.
    worker_log = cluster.core.read_namespaced_pod_log(workers[0].metadata.name, namespace)
    assert "Accepted publickey for" in worker_log and "orted -mca" in worker_log


def test_deleting_a_worker_mid_run_fails_the_launcher_with_mpiruns_error(cluster: LocalCluster, namespace: str):
    name = "lose-worker"
    create(cluster, namespace, mpijob(name, 1, f"{WHERE}; exec sleep 120", wait_for_workers=True))
    launcher_log = ""

    def all_ranks_running() -> bool:
        nonlocal launcher_log
        pods = pods_of(cluster, namespace, name, "launcher")
        if not pods or pods[-1].status.phase != "Running":
            return False  # (before its container starts kwok may not serve its log yet: 400)
        launcher_log = cluster.core.read_namespaced_pod_log(pods[-1].metadata.name, namespace)
        return sorted(by_rank(launcher_log)) == [0, 1]

    wait_for(all_ranks_running, 90, "both ranks to start", interval_s=0.5)
    victim = f"{name}-worker-1"
    cluster.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=1)
    mpijob_condition(cluster, namespace, name, ("Failed",), 60)
    (launcher,) = pods_of(cluster, namespace, name, "launcher")
    state = launcher.status.container_statuses[0].state.terminated
    assert launcher.status.phase == "Failed" and state.exit_code != 0, launcher.status
    log = cluster.core.read_namespaced_pod_log(launcher.metadata.name, namespace)
    # mpirun's own words (it notices its ssh ending or its daemon's connection first, a race as with
    # real ssh), and the worker's host, its name in the hostfile, named by ssh or by mpirun.
    assert any(words in log for words in MPIRUN_LOST_A_DAEMON), log
    assert f"{victim}.{name}.{namespace}.svc" in log


def test_a_failing_rank_fails_mpirun_with_its_code_and_last_lines_and_the_launcher_retries(
        cluster: LocalCluster, namespace: str):
    name = "bad-rank"
    program = ('if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then echo "rank 1 gives up" >&2; exit 3; fi; sleep 30')
    create(cluster, namespace, mpijob(name, 1, program, backoff_limit=1, wait_for_workers=True))
    job = mpijob_condition(cluster, namespace, name, ("Failed",), 90)
    launchers = pods_of(cluster, namespace, name, "launcher")
    # backoffLimit 1: the launcher ran twice, and both runs show, in its Job's and the MPIJob's status.
    assert len(launchers) == 2
    assert cluster.batch.read_namespaced_job(f"{name}-launcher", namespace).status.failed == 2
    assert job["status"]["replicaStatuses"]["Launcher"]["failed"] == 2
    for launcher in launchers:
        assert launcher.status.container_statuses[0].state.terminated.exit_code == 3, launcher.status
        log = cluster.core.read_namespaced_pod_log(launcher.metadata.name, namespace)
        assert by_rank(log)[1] == ["rank 1 gives up"], log
        # mpirun's own words: it prints at least one of the two (under load it sometimes exits
        # before printing its summary, outside the local cluster too).
        assert any(words in log for words in MPIRUN_RANK_FAILED), log
