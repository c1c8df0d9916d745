"""The shipped parts as shipped, on real nodes: the workloads image (workloads/Dockerfile) trains on
2 real nodes (kubelet + containerd), as an MPIJob whose launcher's mpirun reaches each worker's real
sshd with the keys mpi-operator mounts, with torchrun, and as DLRover ElasticJobs (DLRover's operator
and master); a worker killed mid-run fails the test in seconds naming pod, node and exit. (The kubetest2
image's Job: test_kubetest2_image.py.)

The images come from `hack/images build` (cached by their inputs) and are imported into the nodes
with `hack/local-cluster load-image`; a checkout without hack/images skips these tests, saying so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.stream import stream

from ..conftest import REPO, LocalCluster, image_on_real_nodes, run_local_cluster, wait_for
from ..kubetest2_runs import SHARED_HOST_STRAGGLER_ENV, case_properties, junit_cases

sys.path.insert(0, str(REPO))
from localcluster.base import linux
from localcluster.base.layout import ClusterLayout

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes, pytest.mark.images]

BINARY = str(Path(sys.executable).parent / "e2e-nvidia-training")
REAL_NODES = {"real-cpu-0", "real-cpu-1"}


@pytest.fixture(scope="module")
def workloads_image(real_nodes: LocalCluster) -> str:
    return image_on_real_nodes("workloads")


def run_suite(cluster: LocalCluster, artifacts: Path, tests: str, env: dict[str, str],
              timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ARTIFACTS": str(artifacts),
                "ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", **SHARED_HOST_STRAGGLER_ENV, **env}
    full_env.pop("POD_ANNOTATIONS", None)
    return subprocess.run([BINARY, "--test.v", "--nodeType=container-cpu", f"--test.run=^({tests})$"],
                          env=full_env, capture_output=True, text=True, timeout=timeout_s, check=False)


def assert_ran_in_containers(artifacts: Path, test: str) -> dict[str, str]:
    case = junit_cases(artifacts, "e2e-nvidia-training")[test]
    assert case.is_passed, case.result
    props = case_properties(case)
    assert props.get("execution") == "container", props
    nodes = {value for key, value in props.items() if key.startswith("rank.") and key.endswith(".node")}
    assert nodes and nodes <= REAL_NODES, props
    return props


def test_bert_as_an_mpijob_reaches_the_workers_real_sshd(real_nodes: LocalCluster, workloads_image: str,
                                                        tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    done = run_suite(real_nodes, artifacts, "TestBertTraining",
                     {"LAUNCHER": "mpi", "TRAINING_IMAGE": workloads_image, "KEEP_RESOURCES": "true"})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert_ran_in_containers(artifacts, "TestBertTraining")
    # The kept workers are containerd containers whose command is sshd, and sshd is what runs.
    pods = [p for p in real_nodes.core.list_pod_for_all_namespaces(
        label_selector="training.kubeflow.org/job-role=worker").items if p.spec.node_name in REAL_NODES]
    assert len(pods) == 2, [p.metadata.name for p in pods]
    for worker in pods:
        status = worker.status.container_statuses[0]
        assert status.container_id.startswith("containerd://")
        assert "sshd" in " ".join(worker.spec.containers[0].command or worker.spec.containers[0].args or [])
        pid1 = stream(real_nodes.core.connect_get_namespaced_pod_exec, worker.metadata.name,
                      worker.metadata.namespace, command=["cat", "/proc/1/cmdline"], stderr=True, stdin=False,
                      stdout=True, tty=False)
        assert "sshd" in pid1, pid1
    for namespace in {p.metadata.namespace for p in pods}:
        real_nodes.core.delete_namespace(namespace)


@pytest.mark.parametrize("tests", ["TestBertTraining|TestNanoGPTTraining|TestMNISTTraining", "TestElasticRecovery"])
def test_trainings_with_torchrun_in_the_workloads_image(real_nodes: LocalCluster, workloads_image: str,
                                                       tmp_path: Path, tests: str):
    artifacts = tmp_path / "artifacts"
    done = run_suite(real_nodes, artifacts, tests, {"TRAINING_IMAGE": workloads_image})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    for test in tests.split("|"):
        assert_ran_in_containers(artifacts, test)


@pytest.mark.parametrize("test", ["TestNanoGPTTraining", "TestElasticRecovery"])
def test_nanogpt_as_a_dlrover_elasticjob_with_dlrovers_operator_and_master(real_nodes: LocalCluster,
                                                                          workloads_image: str, tmp_path: Path,
                                                                          test: str):
    """LAUNCHER=dlrover: the local cluster's DLRover operator (its Go module, unpatched) makes the
    master pod, DLRover's master (dlrover from PyPI, in the workloads image) makes a worker per
    real node running dlrover-run; under TestElasticRecovery the deleted worker is relaunched by the
    master and the ranks resume from the checkpoint. The JUnit has the operator's lines about the
    job and the master's log."""
    artifacts = tmp_path / "artifacts"
    operator_log = run_local_cluster("log-file", "elasticjob-operator").strip()
    done = run_suite(real_nodes, artifacts, test, {"TRAINING_IMAGE": workloads_image, "LAUNCHER": "dlrover",
                                                   "DLROVER_OPERATOR_LOG": operator_log})
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    props = assert_ran_in_containers(artifacts, test)
    assert props["launcher"] == "dlrover", props
    assert int(props["operator.dlrover-elasticjob-operator.lines"]) > 0, props
    case = junit_cases(artifacts, "e2e-nvidia-training")[test]
    out = case.system_out or ""
    assert "==== DLRover ElasticJob operator:" in out and "phase Running" in out, out[-3000:]
    # The master's own log (DLRover's master module, platform pyk8s) is captured with the workers'.
    assert "=== pod elasticjob-" in out and "platform = pyk8s" in out, out[-3000:]
    if test == "TestElasticRecovery":
        assert int(props["elastic.restart_count"]) >= 1 and int(props["elastic.resumed_from_step"]) >= 5, props
        # The deleted worker's rank came back in a pod the master relaunched (a new node id).
        deleted = props["elastic.deleted_pod"]
        ranks = {value for key, value in props.items() if key.startswith("rank.") and key.endswith(".pod")}
        assert deleted not in ranks and any("-edljob-worker-" in pod for pod in ranks), props


def container_pids(state_dir: Path, container_id: str) -> set[int]:
    """The processes of one container, found through its cgroup under the real nodes'."""
    layout = ClusterLayout(state_dir)
    pids: set[int] = set()
    for hierarchy in linux.cgroup_hierarchies()[:1]:
        for folder in (hierarchy / layout.cgroup).rglob(container_id):
            pids.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
    return pids


def test_a_worker_killed_mid_run_fails_in_seconds_naming_pod_node_and_exit(real_nodes: LocalCluster,
                                                                          workloads_image: str, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    env = {**os.environ, "KUBECONFIG": str(real_nodes.kubeconfig), "ARTIFACTS": str(artifacts), "ACCELERATOR": "cpu",
           "WORKLOAD_SIZE": "base", "JOB_TIMEOUT": "10m", "TRAINING_IMAGE": workloads_image,
           "KUBETEST2_RUN_ID": uuid.uuid4().hex[:8]}
    env.pop("POD_ANNOTATIONS", None)
    process = subprocess.Popen([BINARY, "--test.v", "--nodeType=container-cpu", "--test.run=^TestBertTraining$"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    namespace = f"kt2t-{env['KUBETEST2_RUN_ID']}-testberttraining"

    def running_worker() -> client.V1Pod | None:
        try:
            pods = real_nodes.core.list_namespaced_pod(namespace).items
        except client.ApiException:
            return None
        ready = [p for p in pods if p.status.phase == "Running" and p.status.container_statuses
                 and p.status.container_statuses[0].state.running]
        return ready[-1] if len(ready) == 2 else None

    victim = wait_for(running_worker, 300, f"2 running training pods in {namespace}")
    # Training, not starting: its first step is logged (a fixed 5 s after Running guessed how long
    # torch's start takes on a loaded host).
    wait_for(lambda: "KT2T_STEP " in real_nodes.core.read_namespaced_pod_log(victim.metadata.name, namespace),
             300, f"{victim.metadata.name} to log its first training step")
    state = Path(real_nodes.kubeconfig).parent
    container = victim.status.container_statuses[0].container_id.split("://", 1)[1]
    pids = container_pids(state, container)
    assert pids, f"no processes in the cgroup of container {container}"
    killed_at = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    output, _ = process.communicate(timeout=300)
    elapsed = time.monotonic() - killed_at
    assert process.returncode == 1, output[-4000:]
    assert elapsed < 60, f"the failure took {elapsed:.0f}s after the kill"
    case = junit_cases(artifacts, "e2e-nvidia-training")["TestBertTraining"]
    (failure,) = case.result
    message = failure.message or ""
    assert victim.metadata.name in message and victim.spec.node_name in message, message
    assert "137" in message, message
