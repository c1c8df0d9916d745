"""GPU sharing through the real kubetest2 on kwok p5 nodes (issue 23 item 14): TestTimeSlicing and
TestMps replace the device plugin this run installed by a sharing one, the node agent plays its
sharing (localcluster/emulation/gpu_sharing.py: advertised GPUs, replica UUIDs, compute mode), the
verdicts judge it, and the stock plugin comes back; a node whose plugin does not share fails the
test naming it, and is restored all the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from ..conftest import LocalCluster
from ..kubetest2_runs import CANNED_LOG_ANNOTATION as CANNED
from ..kubetest2_runs import case_properties, junit_cases, kubetest2, suite_properties

pytestmark = pytest.mark.integration

# Canned pods hold their GPU 30 s (kwok's run-duration), as the real pods sleep 30 s: long enough for
# the Job controllers to start all of them (32 a node at 4 replicas, on both nodes, created in slow-start batches)
# while the first still run. 15 s was a guess at how fast that goes on a loaded 2-core host.
SHARING_SUITE = {"ACCELERATOR": "nvidia",
                 "POD_ANNOTATIONS": f"{CANNED}=nvidia-suite,kubetest2-training.local/run-duration=30s"}
NODES = ("kwok-p5-0", "kwok-p5-1")
SHARING_OFF_LABEL = "kubetest2-training.local/gpu-sharing"


def gpus_advertised(cluster: LocalCluster) -> dict[str, str]:
    return {n: cluster.core.read_node(n).status.allocatable["nvidia.com/gpu"] for n in NODES}


def assert_restored(cluster: LocalCluster, stderr: str, mode: str) -> None:
    """The stock plugin came back (then, installed by the run, was removed at its end), nothing of
    the sharing is left, and each node advertises its 8 GPUs again."""
    assert "GPU sharing: stock device plugin restored" in stderr, stderr[-3000:]
    assert "removed DaemonSet kube-system/nvidia-device-plugin-daemonset" in stderr
    apps = client.AppsV1Api(cluster.api)
    assert [d.metadata.name for d in apps.list_namespaced_daemon_set("kube-system").items
            if "nvidia-device-plugin" in d.metadata.name] == []
    assert [c.metadata.name for c in cluster.core.list_namespaced_config_map("kube-system").items
            if c.metadata.name == "nvidia-device-plugin-sharing"] == []
    assert gpus_advertised(cluster) == {n: "8" for n in NODES}, mode


def test_time_slicing_shares_each_gpu_and_the_stock_plugin_comes_back(p5_nodes: LocalCluster, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    done = kubetest2(p5_nodes, artifacts, "exec", "nvidia.test", "--test.v", "--test.run=^TestTimeSlicing$",
                     "--timeSlicingEnabled=true", "--timeSlicingReplicas=4", "--nodeType=p5.48xlarge",
                     env=SHARING_SUITE, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    case = junit_cases(artifacts, "e2e-nvidia")["TestTimeSlicing"]
    props = case_properties(case)
    assert props["gpu_sharing.replicas"] == "4"
    assert {props[f"node.{n}.gpus_advertised"] for n in NODES} == {"32"}
    # upstream's count: every node of the type, 32 pods on each node's 8 GPUs, 4 each
    assert props["gpu_sharing.pods"] == "64" and props["gpu_sharing.peak_running"] == "64"
    assert len(props["gpu_sharing.uuids"].split(",")) == 16
    assert props["gpu_sharing.compute_modes"] == "Default"
    assert props["execution"] == "canned"
    assert props["check.gpu_sharing.overlap"].startswith("pass")
    assert suite_properties(artifacts, "e2e-nvidia")["gpu_sharing.time-slicing"] == "restored"
    assert_restored(p5_nodes, done.stderr, "time-slicing")


def test_mps_runs_its_control_daemon_and_the_compute_mode_says_so(p5_nodes: LocalCluster, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    # upstream's line (#817): its test name and replica flag, which wins over GPU_SHARING_REPLICAS
    done = kubetest2(p5_nodes, artifacts, "exec", "nvidia.test", "--test.run=TestMps", "--mpsEnabled=true",
                     "--mpsReplicas=2", "--nodeType=p5.48xlarge", env={**SHARING_SUITE, "GPU_SHARING_REPLICAS": "4"},
                     timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    props = case_properties(junit_cases(artifacts, "e2e-nvidia")["TestMps"])
    assert {props[f"node.{n}.gpus_advertised"] for n in NODES} == {"16"}
    assert props["gpu_sharing.peak_running"] == "32"  # 16 a node, both nodes
    assert props["gpu_sharing.compute_modes"] == "Exclusive_Process"
    assert props["check.gpu_sharing.compute_mode"].startswith("pass")
    assert "created ConfigMap kube-system/nvidia-device-plugin-sharing, DaemonSet " \
           "kube-system/nvidia-device-plugin-mps-control-daemon" in done.stderr
    assert_restored(p5_nodes, done.stderr, "mps")


def test_a_node_whose_plugin_does_not_share_fails_the_test_naming_it_and_is_restored(p5_nodes: LocalCluster,
                                                                                     tmp_path: Path):
    p5_nodes.core.patch_node("kwok-p5-1", {"metadata": {"labels": {SHARING_OFF_LABEL: "off"}}})
    try:
        artifacts = tmp_path / "artifacts"
        done = kubetest2(p5_nodes, artifacts, "exec", "nvidia.test", "--test.run=^TestTimeSlicing$",
                         "--timeSlicingEnabled", "--nodeType=p5.48xlarge",
                         env={**SHARING_SUITE, "DISCOVERY_TIMEOUT": "20s"}, timeout=600)
    finally:
        p5_nodes.core.patch_node("kwok-p5-1", {"metadata": {"labels": {SHARING_OFF_LABEL: None}}})
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    (failure,) = junit_cases(artifacts, "e2e-nvidia")["TestTimeSlicing"].result
    assert "kwok-p5-1 advertises 8 nvidia.com/gpu, expected 32 (8 GPUs x 4 replicas)" in failure.message
    assert "kwok-p5-0 advertises" not in failure.message
    assert_restored(p5_nodes, done.stderr, "time-slicing")


def test_enabled_without_the_device_plugin_install_skips_as_upstreams(p5_nodes: LocalCluster, tmp_path: Path):
    artifacts = tmp_path / "artifacts"
    done = kubetest2(p5_nodes, artifacts, "exec", "nvidia.test", "--test.run=^TestMPS$", "--mpsEnabled",
                     "--installDevicePlugin=false", env=SHARING_SUITE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    case = junit_cases(artifacts, "e2e-nvidia")["TestMps"]
    assert case.is_skipped and "requires --installDevicePlugin" in case.result[0].message
    assert "NVIDIA device plugin" not in done.stderr  # nothing installed, nothing replaced


def test_a_plugin_present_before_the_run_is_replaced_and_put_back_as_it_was(p5_nodes: LocalCluster, tmp_path: Path):
    """upstream's: the device plugin under the stock name is replaced whoever installed it; here it
    comes back afterwards as it was (its labels, its spec), not as this harness's stock one."""
    from harness.cluster.labels import MANAGED_BY_LABEL, RUN_ID_LABEL
    from harness.setup.addons import NVIDIA_DEVICE_PLUGIN, addon_objects

    (plugin,) = addon_objects(NVIDIA_DEVICE_PLUGIN, "platform")
    labels = plugin["metadata"]["labels"]
    for ours in (MANAGED_BY_LABEL, RUN_ID_LABEL):
        labels.pop(ours)
    labels["owner"] = "platform"
    apps = client.AppsV1Api(p5_nodes.api)
    apps.create_namespaced_daemon_set("kube-system", plugin)
    try:
        artifacts = tmp_path / "artifacts"
        done = kubetest2(p5_nodes, artifacts, "exec", "nvidia.test", "--test.run=^TestTimeSlicing$",
                         "--timeSlicingEnabled=true", "--timeSlicingReplicas=2", "--nodeType=p5.48xlarge",
                         env=SHARING_SUITE, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        props = case_properties(junit_cases(artifacts, "e2e-nvidia")["TestTimeSlicing"])
        assert {props[f"node.{n}.gpus_advertised"] for n in NODES} == {"16"}
        assert "(present before the run) by one sharing each GPU 2 times" in done.stderr
        assert "GPU sharing: present device plugin restored" in done.stderr
        back = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
        assert back.metadata.labels == {"owner": "platform"}
        assert not any(v.name == "config" for v in back.spec.template.spec.volumes or [])
        assert gpus_advertised(p5_nodes) == {n: "8" for n in NODES}
    finally:
        apps.delete_namespaced_daemon_set("nvidia-device-plugin-daemonset", "kube-system")
