"""First contact with a GPU cluster (issue 23), on the local cluster's kwok nodes: nodes tainted as
GPU node groups taint them still run the suite's pods; a DaemonSet kept off a node by a taint it
does not tolerate fails in seconds naming the node and the taint.

The same behaviour on real kubelet nodes: tests/integration/realnodes/test_first_contact_real.py (skipped
where no `container-cpu` node exists).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import CANNED_LOG_ANNOTATION, case_properties, junit_cases, kubetest2

pytestmark = pytest.mark.integration

GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
UNTOLERATED = "kt2t-untolerated=yes:NoSchedule"


@pytest.fixture
def tainted(cluster: LocalCluster) -> Iterator[list[tuple[str, str]]]:
    """Taints to put on nodes, (node, taint) appended by the test; each removed afterwards, and the
    default nodes (2 cpu) back."""
    added: list[tuple[str, str]] = []
    try:
        yield added
    finally:
        for node, taint in added:
            cluster.taint(node, taint.split("=")[0].split(":")[0] + "-")
        ensure_default_nodes(cluster)


def taint(cluster: LocalCluster, added: list[tuple[str, str]], node: str, text: str) -> None:
    cluster.taint(node, text)
    added.append((node, text))


def test_training_pods_schedule_on_nodes_tainted_nvidia_gpu(cluster: LocalCluster, tainted, tmp_path: Path):
    ensure_default_nodes(cluster)
    for node in ("kwok-cpu-0", "kwok-cpu-1"):
        taint(cluster, tainted, node, GPU_TAINT)
    artifacts = tmp_path / "artifacts"
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia-training", "--test.run=^TestBertTraining$")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (_service, job) = yaml.safe_load_all((artifacts / "e2e-nvidia-training" / "TestBertTraining" / "manifests"
                                         / "torchrun-job.yaml").read_text())
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in job["spec"]["template"]["spec"]["tolerations"]
    props = case_properties(junit_cases(artifacts, "e2e-nvidia-training")["TestBertTraining"])
    assert {props["rank.0.node"], props["rank.1.node"]} == {"kwok-cpu-0", "kwok-cpu-1"}


def containerd_check(cluster: LocalCluster, artifacts: Path, tolerations: str):
    """TestContainerdConfig on the GPU nodes (canned nvidia-suite logs, the nodes' own GPU capacity)."""
    return kubetest2(cluster, artifacts, "exec", "nvidia.test", "--test.run=^TestContainerdConfig$",
                     "--installDevicePlugin=false",
                     env={"ACCELERATOR": "nvidia", "POD_ANNOTATIONS": f"{CANNED_LOG_ANNOTATION}=nvidia-suite",
                          "TOLERATIONS": tolerations, "JOB_TIMEOUT": "10m"})


def test_a_daemonset_kept_off_a_node_by_a_taint_fails_at_once_naming_node_and_taint(cluster: LocalCluster, tainted,
                                                                                      tmp_path: Path):
    cluster.set_nodes("gpu", 2)
    for node in ("kwok-gpu-0", "kwok-gpu-1"):
        taint(cluster, tainted, node, GPU_TAINT)  # tolerated by every pod of the suite
    taint(cluster, tainted, "kwok-gpu-1", UNTOLERATED)
    started = time.monotonic()
    done = containerd_check(cluster, tmp_path / "short", "dedicated=ml:NoSchedule")  # does not cover it
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    (failure,) = junit_cases(tmp_path / "short", "e2e-nvidia")["TestContainerdConfig"].result
    assert ("daemonset containerd-check places pods on 1 of the 2 selected nodes; "
            f"kwok-gpu-1: taint {UNTOLERATED} not tolerated") in failure.message, failure.message
    assert "kwok-gpu-0" not in failure.message.split("selected nodes;")[1]
    assert took < 90, f"took {took:.0f}s: JOB_TIMEOUT is 10m, the failure must not wait for it"
    # TOLERATIONS covering the taint: the same DaemonSet runs on both nodes.
    done = containerd_check(cluster, tmp_path / "tolerated", f"dedicated=ml:NoSchedule,{UNTOLERATED}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
