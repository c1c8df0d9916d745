"""First contact (issue 23), on real kubelet nodes (the realnodes branch: `hack/local-cluster up
--real-nodes 2`, instance type container-cpu): what kwok nodes cannot show. Skipped where no
container-cpu node exists, or without KT2T_REAL_NODE_IMAGE (the workloads image, loaded into the
real nodes: hack/images on that branch); the lead enables them there.

- item 4: real nodes tainted nvidia.com/gpu=present:NoSchedule still run TestNanoGPTTraining;
- item 9: the kept pods mount a memory-backed /dev/shm (seen from inside: tmpfs) and request CPU;
- item 6: apt-get installs a package (a local .deb with a file owned by another user: no network)
  in a per-node pod with exactly APT_CAPABILITIES, and fails with CHOWN dropped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cluster.manifests import render
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.workload import Placement, Workload
from testbins.e2e_nvidia import APT_CAPABILITIES

from .conftest import LocalCluster, wait_for
from .kubetest2_runs import case_properties, junit_cases

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes, pytest.mark.images]

REAL_NODE_TYPE = "container-cpu"
BIN = Path(sys.executable).parent


def real_nodes_of(cluster: LocalCluster) -> list[str]:
    nodes = cluster.core.list_node(label_selector=f"node.kubernetes.io/instance-type={REAL_NODE_TYPE}").items
    return sorted(n.metadata.name for n in nodes)


@pytest.fixture
def real(cluster: LocalCluster) -> tuple[LocalCluster, list[str], str]:
    nodes = real_nodes_of(cluster)
    if not nodes:
        pytest.skip(f"no {REAL_NODE_TYPE} node: real nodes are up only with `hack/local-cluster up --real-nodes N`")
    image = os.environ.get("KT2T_REAL_NODE_IMAGE")
    if not image:
        pytest.skip("KT2T_REAL_NODE_IMAGE (the workloads image loaded into the real nodes) is not set")
    return cluster, nodes, image


def run_training(cluster: LocalCluster, artifacts: Path, test: str, image: str, **env: str):
    full_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "ARTIFACTS": str(artifacts),
                "ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", "TRAINING_IMAGE": image, **env}
    full_env.pop("POD_ANNOTATIONS", None)
    return subprocess.run([str(BIN / "e2e-nvidia-training"), "--test.v", f"--nodeType={REAL_NODE_TYPE}",
                           f"--test.run=^{test}$"], env=full_env, capture_output=True, text=True, timeout=900,
                          check=False)


def test_real_nodes_tainted_nvidia_gpu_still_run_nanogpt(real, tmp_path: Path):
    cluster, nodes, image = real
    try:
        for node in nodes:
            cluster.taint(node, "nvidia.com/gpu=present:NoSchedule")
        done = run_training(cluster, tmp_path / "artifacts", "TestNanoGPTTraining", image)
    finally:
        for node in nodes:
            cluster.taint(node, "nvidia.com/gpu-")
    assert done.returncode == 0, done.stdout[-4000:]
    props = case_properties(junit_cases(tmp_path / "artifacts", "e2e-nvidia-training")["TestNanoGPTTraining"])
    assert {v for k, v in props.items() if k.startswith("rank.") and k.endswith(".node")} <= set(nodes)


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


# A package with a file owned by uid 1000 (dpkg chowns it), installed offline by apt from a local file.
APT_SCRIPT = r"""set -eux
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/opt/kt2t
printf 'Package: kt2t-caps\nVersion: 1.0\nArchitecture: all\nMaintainer: kt2t\nDescription: caps\n' \
  > /tmp/pkg/DEBIAN/control
echo hello > /tmp/pkg/opt/kt2t/file && chown 1000:1000 /tmp/pkg/opt/kt2t/file && chmod 0640 /tmp/pkg/opt/kt2t/file
dpkg-deb --root-owner-group --build /tmp/pkg /tmp/kt2t-caps.deb || dpkg-deb --build /tmp/pkg /tmp/kt2t-caps.deb
apt-get install -y /tmp/kt2t-caps.deb
test "$(stat -c %u /opt/kt2t/file)" = 0 -o "$(stat -c %u /opt/kt2t/file)" = 1000
echo APT-INSTALL-DONE
"""


def apt_pod(cluster: LocalCluster, namespace: str, node: str, image: str, capabilities: tuple[str, ...]) -> str:
    """The per-node launcher's Job running APT_SCRIPT with `capabilities`; its pod's phase at the end."""
    where = Placement(namespace=namespace, labels={"app.kubernetes.io/managed-by": "kubetest2-training"},
                      pod_annotations={}, pod_env={}, node_type=REAL_NODE_TYPE, node_names=(node,),
                      processes_per_node=0, efa_per_node=0, accelerator="cpu", image=image, job_timeout=300)
    name = "apt-" + "-".join(c.lower().replace("_", "") for c in capabilities)[:40]
    workload = Workload(name, binary="bash", args=("-c", APT_SCRIPT), capabilities=capabilities)
    for rendering in LAUNCHERS["per-node"].renderings(workload, where):
        for obj in render(rendering.template, rendering.fields):
            cluster.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(obj))
    return wait_for(lambda: next((p.status.phase for p in cluster.core.list_namespaced_pod(namespace).items
                                  if p.metadata.name.startswith(name) and p.status.phase in ("Succeeded", "Failed")),
                                 None), 300, f"pod {name} to end")


def test_apt_installs_with_exactly_apts_capabilities_on_a_real_node(real, namespace: str):
    cluster, nodes, image = real
    assert apt_pod(cluster, namespace, nodes[0], image, APT_CAPABILITIES) == "Succeeded"
    assert apt_pod(cluster, namespace, nodes[0], image,
                   tuple(c for c in APT_CAPABILITIES if c != "CHOWN")) == "Failed"
