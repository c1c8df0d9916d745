"""First contact (issue 23) on the local cluster's real kubelet nodes (`hack/local-cluster up
--real-nodes 2`, instance type container-cpu): what kwok nodes cannot show, with the pod specs the
launchers render.

In CI (the kubetest2 image: Debian bookworm-slim with apt and dpkg, 134 MB, built by hack/images):
- item 6: apt-get installs a package (a local .deb with a file owned by another user: no network)
  in a per-node pod with exactly APT_CAPABILITIES, and fails with CHOWN dropped (dpkg cannot give
  the file to its owner);
- item 9: a per-node pod's /dev/shm is the memory-backed emptyDir (tmpfs larger than the runtime's
  64 MiB default), seen from inside the container;
- item 4: real nodes tainted nvidia.com/gpu=present:NoSchedule still get the DaemonSet launcher's pods.
With the workloads image (marked `images`; KT2T_WITH_IMAGES=0 hack/test leaves them out): the tainted nodes run
TestNanoGPTTraining, and its kept pods mount a memory /dev/shm and request CPU; real nodes that
advertise one nvidia.com/gpu (an extended resource patched into their status, as a device plugin
would advertise it) but have no GPU fail ACCELERATOR=nvidia TestBertTraining fast, naming CUDA (the
workloads' no-GPU check, item 2, in the image as shipped, under a real kubelet).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.cluster.manifests import render
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.workload import Placement, Workload
from testbins.nvidia.capabilities import APT_CAPABILITIES

from ..conftest import LocalCluster, exec_in, image_on_real_nodes, real_node_names, wait_for
from ..kubetest2_runs import SHARED_HOST_STRAGGLER_ENV, case_properties, junit_cases, suite_properties

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

REAL_NODE_TYPE = "container-cpu"
BIN = Path(sys.executable).parent
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
FAST_SECONDS = 300  # the pods' start on a loaded 2-core host, then the workloads' first check


@pytest.fixture(scope="module")
def kubetest2_image(real_nodes: LocalCluster) -> str:
    return image_on_real_nodes("kubetest2")


@pytest.fixture
def real(real_nodes: LocalCluster) -> tuple[LocalCluster, list[str], str]:
    """The cluster, its real nodes and the workloads image loaded into them (tests marked `images`)."""
    return real_nodes, real_node_names(real_nodes), image_on_real_nodes("workloads")


def run_training(cluster: LocalCluster, artifacts: Path, test: str, image: str, **env: str):
    full_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ARTIFACTS": str(artifacts),
                "ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", "TRAINING_IMAGE": image,
                **SHARED_HOST_STRAGGLER_ENV, **env}
    full_env.pop("POD_ANNOTATIONS", None)
    return subprocess.run([str(BIN / "e2e-nvidia-training"), "--test.v", f"--nodeType={REAL_NODE_TYPE}",
                           f"--test.run=^{test}$"], env=full_env, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.images
def test_real_nodes_tainted_nvidia_gpu_still_run_nanogpt(real, tmp_path: Path):
    cluster, nodes, image = real
    try:
        for node in nodes:
            cluster.taint(node, GPU_TAINT)
        done = run_training(cluster, tmp_path / "artifacts", "TestNanoGPTTraining", image)
    finally:
        for node in nodes:
            cluster.taint(node, "nvidia.com/gpu-")
    assert done.returncode == 0, done.stdout[-4000:]
    props = case_properties(junit_cases(tmp_path / "artifacts", "e2e-nvidia-training")["TestNanoGPTTraining"])
    assert {v for k, v in props.items() if k.startswith("rank.") and k.endswith(".node")} <= set(nodes)


def advertise_gpus(cluster: LocalCluster, node: str, count: int | None) -> None:
    """Patch the node's status to advertise `count` nvidia.com/gpu (None: none), as the NVIDIA device
    plugin would; kubelet keeps an extended resource that no device plugin manages."""
    value = str(count) if count is not None else None
    body = {"status": {"capacity": {"nvidia.com/gpu": value}, "allocatable": {"nvidia.com/gpu": value}}}
    cluster.core.patch_node_status(node, body)


def advertise_one_gpu_each(cluster: LocalCluster, nodes: list[str]) -> None:
    """Every node advertises one nvidia.com/gpu, as a device plugin would, waited for."""
    for node in nodes:
        advertise_gpus(cluster, node, 1)
    wait_for(lambda: all(cluster.core.read_node(n).status.allocatable.get("nvidia.com/gpu") == "1" for n in nodes),
             30, "the real nodes advertising nvidia.com/gpu")


@pytest.mark.images
def test_real_nodes_advertising_a_gpu_without_one_fail_nvidia_bert_fast_naming_cuda(real, tmp_path: Path):
    cluster, nodes, image = real
    try:
        advertise_one_gpu_each(cluster, nodes)
        started = time.monotonic()
        # The test plays the device plugin (the patched status): the pinned plugin's image cannot be
        # pulled here, and on a cluster whose nodes advertise GPUs it is installed already.
        done = run_training(cluster, tmp_path / "artifacts", "TestBertTraining", image, ACCELERATOR="nvidia",
                            INSTALL_DEVICE_PLUGIN="false")
        seconds = time.monotonic() - started
    finally:
        for node in nodes:
            advertise_gpus(cluster, node, None)
    assert done.returncode == 1, done.stdout[-4000:]
    case = junit_cases(tmp_path / "artifacts", "e2e-nvidia-training")["TestBertTraining"]
    message = next(iter(case.result)).message or ""
    assert "CUDA is required" in message and "no usable GPU" in message, message
    assert any(f"on node {n}" in message for n in nodes), message
    assert "rank.0.device" not in case_properties(case)  # no rank trained on the CPU instead
    assert seconds < FAST_SECONDS, f"took {seconds:.0f}s: {message}"


@pytest.mark.images
def test_kept_pods_mount_a_memory_dev_shm_and_request_cpu(real, tmp_path: Path):
    cluster, _, image = real
    done = run_training(cluster, tmp_path / "artifacts", "TestMNISTTraining", image, KEEP_RESOURCES="true",
                        KUBETEST2_RUN_ID="shmcheck")
    assert done.returncode == 0, done.stdout[-4000:]
    pods = [p for ns in cluster.core.list_namespace(label_selector="kubetest2-training/run-id=shmcheck").items
            for p in cluster.core.list_namespaced_pod(ns.metadata.name).items]
    try:
        assert pods
        for pod in pods:
            (container,) = pod.spec.containers
            assert container.resources.requests["cpu"], pod.metadata.name
            shm = next(m for m in container.volume_mounts if m.mount_path == "/dev/shm")
            assert next(v for v in pod.spec.volumes if v.name == shm.name).empty_dir.medium == "Memory"
    finally:
        for ns in {p.metadata.namespace for p in pods}:
            cluster.core.delete_namespace(ns)


# A package with a file owned by uid 1000, installed offline by apt from a local file: dpkg must chown
# the file it unpacks to its owner (CAP_CHOWN). The .deb is written by python3 (an ar archive of
# tar members whose headers carry the owner), so that making it needs no chown: a package of
# root-owned files installs without CHOWN (seen on the real nodes; apt then only warns that it could
# not chown its partial/ folders to _apt), which would prove nothing.
APT_SCRIPT = (Path(__file__).parent / "apt-install-owned-file.sh").read_text()


def placement(namespace: str, nodes: list[str], image: str) -> Placement:
    return Placement(namespace=namespace, labels={"app.kubernetes.io/managed-by": "kubetest2-training"},
                     pod_annotations={}, pod_env={}, node_type=REAL_NODE_TYPE, node_names=tuple(nodes),
                     processes_per_node=0, efa_per_node=0, accelerator="cpu", image=image, job_timeout=300,
                     # The isolated nodes reach no registry: the image is imported, never pulled.
                     image_pull_policy="IfNotPresent")


def apply(cluster: LocalCluster, launcher: str, workload: Workload, where: Placement) -> None:
    for rendering in LAUNCHERS[launcher].renderings(workload, where):
        for obj in render(rendering.template, rendering.fields):
            cluster.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(obj))


def per_node_pod(cluster: LocalCluster, namespace: str, node: str, image: str, name: str, script: str,
                 capabilities: tuple[str, ...] = ()) -> tuple[str, str]:
    """The per-node launcher's Job running `script` on `node`: its pod's phase at the end, and its log."""
    apply(cluster, "per-node", Workload(name, binary="bash", args=("-c", script), capabilities=capabilities),
          placement(namespace, [node], image))

    def ended():
        return next((p for p in cluster.core.list_namespaced_pod(namespace).items
                     if p.metadata.name.startswith(name) and p.status.phase in ("Succeeded", "Failed")), None)

    pod = wait_for(ended, 300, f"pod {name} to end")
    return pod.status.phase, cluster.core.read_namespaced_pod_log(pod.metadata.name, namespace)


def test_apt_installs_with_exactly_apts_capabilities_on_a_real_node(real_nodes: LocalCluster, kubetest2_image: str,
                                                                   namespace: str):
    node = real_node_names(real_nodes)[0]
    phase, log = per_node_pod(real_nodes, namespace, node, kubetest2_image, "apt-all", APT_SCRIPT, APT_CAPABILITIES)
    assert (phase, "APT-INSTALL-DONE" in log) == ("Succeeded", True), log
    without_chown = tuple(c for c in APT_CAPABILITIES if c != "CHOWN")
    phase, log = per_node_pod(real_nodes, namespace, node, kubetest2_image, "apt-nochown", APT_SCRIPT, without_chown)
    assert phase == "Failed" and "APT-INSTALL-DONE" not in log, log
    assert "Operation not permitted" in log, log  # dpkg could not give the file to its owner


def test_a_per_node_pod_on_a_real_node_has_a_memory_backed_dev_shm(real_nodes: LocalCluster, kubetest2_image: str,
                                                                  namespace: str):
    node = real_node_names(real_nodes)[1]
    phase, log = per_node_pod(real_nodes, namespace, node, kubetest2_image, "shm",
                              "grep ' /dev/shm ' /proc/mounts; df -k /dev/shm | tail -1")
    assert phase == "Succeeded", log
    mount, usage = log.strip().splitlines()[-2:]
    assert mount.split()[2] == "tmpfs", log
    size_kib = int(usage.split()[1])
    assert size_kib > 64 * 1024, f"/dev/shm is {size_kib} KiB: the runtime's 64 MiB default, not the emptyDir\n{log}"


def test_gpu_tainted_real_nodes_still_get_the_daemonset_launchers_pods(real_nodes: LocalCluster,
                                                                      kubetest2_image: str, namespace: str):
    nodes = real_node_names(real_nodes)
    workload = Workload("tainted-check", binary="sh", args=("-c", "echo placed; exec sleep 600"))
    try:
        for node in nodes:
            real_nodes.taint(node, GPU_TAINT)
        apply(real_nodes, "daemonset", workload, placement(namespace, nodes, kubetest2_image))

        def running_everywhere():
            pods = real_nodes.core.list_namespaced_pod(namespace).items
            placed = {p.spec.node_name for p in pods if p.status.phase == "Running"}
            return placed if placed >= set(nodes) else None

        assert wait_for(running_everywhere, 120, f"a running pod on each of {nodes} (tainted {GPU_TAINT})")
        pod = real_nodes.core.list_namespaced_pod(namespace).items[0]
        assert "placed" in exec_in(real_nodes, pod, "echo placed")
    finally:
        for node in nodes:
            real_nodes.taint(node, "nvidia.com/gpu-")


@pytest.mark.images
def test_unit_test_in_an_image_without_gpu_unit_tests_fails_at_once_naming_the_image(real, tmp_path: Path):
    """Issue 43 items 4 and 5: upstream's unit-test given an image without gpu_unit_tests (here the
    workloads image, as the project's nccl-tests image) fails at once naming --nvidiaTestImage and
    what the image must hold, from the pod's own check on a real kubelet; and nodes that already
    advertise nvidia.com/gpu (patched status, as a plugin under any name would) get no second plugin."""
    cluster, nodes, image = real
    artifacts = tmp_path / "artifacts"
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ARTIFACTS": str(artifacts)}
    env.pop("POD_ANNOTATIONS", None)
    try:
        advertise_one_gpu_each(cluster, nodes)
        started = time.monotonic()
        done = subprocess.run([str(BIN / "e2e-nvidia"), "--test.v", f"--nodeType={REAL_NODE_TYPE}",
                               "--test.run=^TestSingleNodeUnitTest$/^unit-test$", f"--nvidiaTestImage={image}"],
                              env=env, capture_output=True, text=True, timeout=900, check=False)
        seconds = time.monotonic() - started
    finally:
        for node in nodes:
            advertise_gpus(cluster, node, None)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    assert "created DaemonSet" not in done.stderr, done.stderr[-4000:]
    assert suite_properties(artifacts, "e2e-nvidia")["addon.nvidia-device-plugin"] == (
        f"present before the run as nodes {', '.join(nodes)} advertising nvidia.com/gpu already: not installed, "
        "not removed")
    message = next(iter(junit_cases(artifacts, "e2e-nvidia")["TestSingleNodeUnitTest/unit-test"].result)).message
    assert f"the image {image} (--nvidiaTestImage / NCCL_TESTS_IMAGE) cannot run upstream's unit test" in message
    assert "gpu_unit_tests/unit_test does not exist" in message and "upstream's gpu_unit_tests" in message, message
    assert seconds < FAST_SECONDS, f"took {seconds:.0f}s: {message}"
