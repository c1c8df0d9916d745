"""The shipped parts as shipped, on real nodes: the workloads image (workloads/Dockerfile) trains on
2 real nodes (kubelet + containerd), as an MPIJob whose launcher's mpirun reaches each worker's real
sshd with the keys mpi-operator mounts, and with torchrun; the kubetest2 image (Dockerfile.kubetest2)
runs the suite from inside the cluster as a Job with a ServiceAccount bound by manifests/rbac.yaml
alone; a worker killed mid-run fails the test in seconds naming pod, node and exit.

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

from harness.cluster.labels import MANAGED_BY_LABEL
from harness.cluster.manifests import render

from .conftest import REPO, LocalCluster, run_local_cluster, wait_for
from .kubetest2_runs import case_properties, junit_cases

sys.path.insert(0, str(REPO / "hack"))
from local_cluster.real_nodes import linux
from local_cluster.real_nodes.layout import ClusterLayout

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes, pytest.mark.images]

HACK_IMAGES = REPO / "hack" / "images"
BINARY = str(Path(sys.executable).parent / "e2e-nvidia-training")
REAL_NODES = {"real-cpu-0", "real-cpu-1"}


def image(name: str) -> str:
    """Builds (or reuses) an image with hack/images, imports it into the real nodes; its reference."""
    if not HACK_IMAGES.exists():
        pytest.skip("hack/images is not in this checkout: the images cannot be built")
    built = subprocess.run([str(HACK_IMAGES), "build", name], capture_output=True, text=True, timeout=3600,
                           check=False)
    assert built.returncode == 0, f"hack/images build {name}:\n{built.stderr[-4000:]}"
    archive = built.stdout.strip().splitlines()[-1]
    run_local_cluster("load-image", archive)
    return subprocess.run([str(HACK_IMAGES), "name", name], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def workloads_image(real_nodes: LocalCluster) -> str:
    return image("workloads")


def run_suite(cluster: LocalCluster, artifacts: Path, tests: str, env: dict[str, str],
              timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ARTIFACTS": str(artifacts),
                "ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", **env}
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
    time.sleep(5)  # training, not starting
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


def test_the_kubetest2_image_runs_the_suite_as_a_job_with_the_rbac_service_account(
        real_nodes: LocalCluster, workloads_image: str, namespace: str):
    kubetest2_image = image("kubetest2")
    labels = {MANAGED_BY_LABEL: "kubetest2-training"}
    objects = render("rbac.yaml", {"Namespace": namespace, "Labels": labels})
    api = client.ApiClient(real_nodes.api.configuration)
    for obj in objects:
        kind = obj["kind"]
        if kind == "ServiceAccount":
            real_nodes.core.create_namespaced_service_account(namespace, obj)
        elif kind == "ClusterRole":
            client.RbacAuthorizationV1Api(api).create_cluster_role(obj)
        else:
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding(obj)
    # kubetest2's noop deployer hands the tester a kubeconfig path; this one holds the
    # ServiceAccount's in-cluster credentials (its token and CA, the `kubernetes` Service's address).
    script = r"""set -u
sa=/var/run/secrets/kubernetes.io/serviceaccount
cat > /tmp/kubeconfig <<END
apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster: {server: "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT", certificate-authority: $sa/ca.crt}
users: [{name: sa, user: {tokenFile: $sa/token}}]
contexts: [{name: sa, context: {cluster: in-cluster, user: sa}}]
current-context: sa
END
kubetest2 noop --kubeconfig=/tmp/kubeconfig --artifacts=/logs/artifacts --test=exec -- \
  e2e-nvidia-training --test.v --nodeType=container-cpu --test.run='^TestMNISTTraining$'
echo $? > /logs/exit-code
while [ ! -e /logs/copied ]; do sleep 1; done
exit "$(cat /logs/exit-code)"
"""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kubetest2"},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": "kubetest2"}}, "spec": {
               "serviceAccountName": "kubetest2-training", "restartPolicy": "Never",
               "nodeSelector": {"node.kubernetes.io/instance-type": "container-cpu"},
               "containers": [{"name": "kubetest2", "image": kubetest2_image, "imagePullPolicy": "IfNotPresent",
                               "command": ["bash", "-c", script],
                               # STRAGGLER_FRACTION: this Job shares the machine's cores with the
                               # trainings it starts; its node's probe is slower by that, not a straggler.
                               "env": [{"name": "ACCELERATOR", "value": "cpu"},
                                       {"name": "WORKLOAD_SIZE", "value": "tiny"},
                                       {"name": "STRAGGLER_FRACTION", "value": "0.05"},
                                       {"name": "TRAINING_IMAGE", "value": workloads_image}]}]}}}}
    try:
        real_nodes.batch.create_namespaced_job(namespace, job)

        def pod_done() -> client.V1Pod | None:
            pods = real_nodes.core.list_namespaced_pod(namespace, label_selector="app=kubetest2").items
            if not pods or pods[0].status.phase != "Running":
                return None
            out = exec_in(real_nodes, pods[0], "cat /logs/exit-code 2>/dev/null")
            return pods[0] if out.strip() else None

        pod = wait_for(pod_done, 900, "the kubetest2 Job to finish its run", interval_s=5)
        # Copied out as `kubectl cp` does: through exec, from the finished run's artifacts.
        junit = exec_in(real_nodes, pod, "cat /logs/artifacts/junit_e2e-nvidia-training.xml")
        exit_code = exec_in(real_nodes, pod, "cat /logs/exit-code").strip()
        exec_in(real_nodes, pod, "touch /logs/copied")
        assert exit_code == "0", junit
        assert 'name="TestMNISTTraining"' in junit and "<failure" not in junit, junit
        assert pod.spec.node_name in REAL_NODES
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        for obj in objects:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])


def exec_in(cluster: LocalCluster, pod: client.V1Pod, command: str) -> str:
    return str(stream(cluster.core.connect_get_namespaced_pod_exec, pod.metadata.name, pod.metadata.namespace,
                      command=["sh", "-c", command], stderr=True, stdin=False, stdout=True, tty=False))
