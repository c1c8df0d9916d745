"""nvidia-dra.test (upstream's test/cases/nvidia-dra): its tests, features and assessments are
upstream's; its ResourceClaimTemplates ask what upstream's do; its MPIJob is upstream's shape with
the workers' devices claimed; the EFA verdict names the node whose NCCL did not use its claimed
EFAs (on the canned logs the integration test serves); the negative test needs the scheduler's
Unschedulable; the local cluster's DRA stand-in publishes the devices upstream's claims select."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cluster.manifests import render
from harness.config.settings import NCCL_TESTS_IMAGE, resolve
from harness.errors import TestFailure
from harness.framework.cli import parse_args
from harness.jobs.job import render_all
from harness.jobs.workload import Workload
from localcluster.emulation import dra as stand_in
from localcluster.emulation.nodes import SHAPES
from testbins import nvidia_dra
from testbins.nvidia_node import dra

CANNED = Path(__file__).resolve().parents[3] / "localcluster" / "emulation" / "canned_logs"
LABELS = {"app.kubernetes.io/managed-by": "kubetest2-training"}
# upstream's rcts/p5/*.yaml (v1beta1, at e548d45e): request -> (device class, allocation mode, count).
UPSTREAM_RCTS = {
    "rct-all-efas": {"all-efas": ("efa.networking.k8s.aws", "All", None)},
    "rct-all-gpus": {"all-gpus": ("gpu.nvidia.com", "All", None)},
    "rct-five-efas-one-gpu": {"five-efas": ("efa.networking.k8s.aws", "ExactCount", 5),
                              "one-gpu": ("gpu.nvidia.com", "ExactCount", 1)},
}


def templates() -> list[dict]:
    return dra.claim_templates("ns", LABELS)


def test_the_tests_features_and_assessments_are_upstreams():
    tests = {test.name: test for test in nvidia_dra.SUITE.tests}
    assert list(tests) == ["TestGPUPresentLabel", "TestNvidiaDRAMultiNode"]
    (label,) = tests["TestGPUPresentLabel"].features
    assert (label.name, label.assessments, dict(label.labels)) == (
        "gpu-present-label", ("GPU nodes are labeled nvidia.com/gpu.present=true by the node image",),
        {"suite": ("nvidia-dra",)})
    features = [(f.name, f.assessments, dict(f.labels)) for f in tests["TestNvidiaDRAMultiNode"].features]
    assert features == [
        ("all-efas-all-gpus", ("MPIJob succeeds",), {"suite": ("nvidia-dra",), "type": ("positive",)}),
        ("five-efas-one-gpu-negative-test", ("Worker pods remain Pending",),
         {"suite": ("nvidia-dra",), "type": ("negative",)}),
    ]
    assert all(test.upstream for test in tests.values())


def test_the_claim_templates_ask_what_upstreams_do_in_resource_k8s_io_v1():
    rendered = {t["metadata"]["name"]: t for t in templates()}
    assert set(rendered) == set(UPSTREAM_RCTS)
    for name, requests in UPSTREAM_RCTS.items():
        spec = rendered[name]["spec"]["spec"]["devices"]
        assert rendered[name]["apiVersion"] == "resource.k8s.io/v1" and rendered[name]["metadata"]["namespace"] == "ns"
        got = {r["name"]: (r["exactly"]["deviceClassName"], r["exactly"]["allocationMode"], r["exactly"].get("count"))
               for r in spec["requests"]}
        assert got == requests
    constraint = rendered["rct-five-efas-one-gpu"]["spec"]["spec"]["devices"]["constraints"]
    assert constraint == [{"requests": ["five-efas", "one-gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]


def test_a_slot_per_claimed_gpu_as_upstreams_compute_params():
    p5 = dra.topology_for("p5.48xlarge")
    positive, negative = dra.CASES
    assert (dra.slots_per_worker(positive, templates(), p5), dra.slots_per_worker(negative, templates(), p5)) == (8, 1)
    with pytest.raises(TestFailure, match="unsupported instance family 'p4d'"):
        dra.topology_for("p4d.24xlarge")
    with pytest.raises(TestFailure, match="rct-nope not found"):
        dra.slots_per_worker(dra.DraCase("x", (("c", "rct-nope"),)), templates(), p5)


def test_the_mpijob_workers_claim_their_devices_instead_of_device_plugin_resources():
    from tests.unit.harness.jobs.test_tolerations import placement

    positive = dra.CASES[0]
    workload = Workload(dra.MPIJOB_NAME, binary="/opt/nccl-tests/build/all_reduce_perf",
                        args=("-b", "8", "-e", "16G", "-n", "100"), image="img:1", launcher="mpi")
    (mpijob,) = render_all(dra.DraMpi(positive.claims, 8).renderings(workload, placement()), Path("/tmp/unused"))
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["resourceClaims"] == [{"name": "all-efas", "resourceClaimTemplateName": "rct-all-efas"},
                                        {"name": "all-gpus", "resourceClaimTemplateName": "rct-all-gpus"}]
    resources = worker["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "all-efas"}, {"name": "all-gpus"}]
    assert "nvidia.com/gpu" not in str(resources) and "vpc.amazonaws.com/efa" not in str(resources)
    command = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert mpijob["spec"]["slotsPerWorker"] == 8 and command[command.index("-np") + 1] == "16"
    negative = render_all(dra.DraMpi(dra.CASES[1].claims, 1).renderings(workload, placement()), Path("/tmp/unused"))
    assert negative[0]["spec"]["slotsPerWorker"] == 1


def test_helm_installs_upstreams_chart_with_the_image_split_as_upstream():
    cfg = resolve(parse_args(["--acceleratorDraDriverImage=nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"]), {})
    args = dra.helm_install_command(cfg)
    assert args[:9] == ["helm", "upgrade", "--install", "nvidia-dra-driver-gpu", "nvidia-dra/nvidia-dra-driver-gpu",
                        "--version", "25.8.1", "--create-namespace", "--namespace"]
    assert "resources.gpus.enabled=true" in args and "gpuResourcesEnabledOverride=true" in args
    assert "image.repository=nvcr.io/nvidia/k8s-dra-driver-gpu" in args and "image.tag=v25.8.1" in args
    untagged = dra.helm_install_command(resolve(parse_args(["--acceleratorDraDriverImage=registry:5000/dra"]), {}))
    assert "image.repository=registry:5000/dra" in untagged and "image.tag=latest" in untagged
    assert not any(a.startswith("image.") for a in dra.helm_install_command(resolve(parse_args([]), {})))


def test_the_flags_keep_upstreams_defaults():
    cfg = resolve(parse_args([]), {})
    assert (cfg.rdma_device_dra_driver_image, cfg.accelerator_dra_driver_image, cfg.auto_mode_enabled) == (
        None, None, False)
    assert cfg.container_test_image == NCCL_TESTS_IMAGE and cfg.dra_pending_stabilization == 120.0
    given = resolve(parse_args(["--autoModeEnabled", "--containerTestImage=x/nccl:1"]),
                    {"DRA_PENDING_STABILIZATION": "5s"})
    assert (given.auto_mode_enabled, given.container_test_image, given.dra_pending_stabilization) == (
        True, "x/nccl:1", 5.0)


def canned(folder: str) -> list[str]:
    return (CANNED / folder / "multi-node-nccl-test.launcher.log").read_text().splitlines()


WORKERS = {"multi-node-nccl-test-worker-0": ("kwok-p5-1", 32), "multi-node-nccl-test-worker-1": ("kwok-p5-0", 32)}


def test_each_node_passes_when_its_nccl_found_the_efas_its_claims_hold():
    checks = dra.judge_efa(WORKERS, dra.nics_found(canned("gpu-node-checks")))
    assert [(c.name, c.status.value) for c in checks] == [("dra.efa.kwok-p5-1", "pass"), ("dra.efa.kwok-p5-0", "pass")]


def test_the_node_whose_nccl_fell_back_to_sockets_is_named():
    checks = dra.judge_efa(WORKERS, dra.nics_found(canned("gpu-node-checks-upstream-passes")))
    failed = [c for c in checks if c.status.value == "fail"]
    assert [c.name for c in failed] == ["dra.efa.kwok-p5-1"]
    assert failed[0].message.startswith("dra.efa on node kwok-p5-1: NCCL on multi-node-nccl-test-worker-0 selected "
                                        "no EFA provider")
    fewer = dra.judge_efa(WORKERS, {"multi-node-nccl-test-worker-0": 31, "multi-node-nccl-test-worker-1": 32})
    assert "found 31 EFA NIC(s) of the 32" in fewer[0].message and fewer[1].status.value == "pass"
    assert dra.judge_efa({"w": ("n", 0)}, {}) == []  # no EFA claimed: no check


def pending_pod(name: str, node: str = "", reason: str = "Unschedulable") -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason,
                                                           "message": "0/2 nodes are available: cannot allocate all "
                                                           "claims"}]}}


def test_the_negative_case_needs_the_schedulers_unschedulable():
    assert dra.unschedulable_check([pending_pod("w0"), pending_pod("w1")]).status.value == "pass"
    bound = dra.unschedulable_check([pending_pod("w0"), pending_pod("w1", node="kwok-p5-0", reason="")])
    assert bound.status.value == "fail" and "w1 is Pending on node kwok-p5-0" in bound.message


def test_the_set_up_fails_naming_the_missing_dranet_image():
    class T:
        cfg = resolve(parse_args([]), {})

    with pytest.raises(TestFailure, match="-rdmaDeviceDraDriverImage is required"):
        dra.required_flags(T())  # type: ignore[arg-type]


def test_the_stand_in_publishes_what_upstreams_claims_select_and_says_so():
    p5 = SHAPES["p5"]
    node = {"metadata": {"name": "kwok-p5-0", "uid": "u"}}
    gpus = stand_in.resource_slice(node, stand_in.GPU_DRIVER, stand_in.gpu_devices(p5))
    efas = stand_in.resource_slice(node, stand_in.RDMA_DRIVER, stand_in.efa_devices(p5))
    assert "no driver runs here" in gpus["metadata"]["annotations"][stand_in.STAND_IN_ANNOTATION]
    assert all(d["attributes"]["type"] == {"string": "gpu"} for d in gpus["spec"]["devices"])
    assert all(d["attributes"]["dra.net/pciDevice"] == {"string": "Elastic Fabric Adapter (EFA)"}
               for d in efas["spec"]["devices"])
    roots = [d["attributes"][stand_in.PCIE_ROOT]["string"] for d in efas["spec"]["devices"]]
    gpu_roots = {d["attributes"][stand_in.PCIE_ROOT]["string"] for d in gpus["spec"]["devices"]}
    # p5: 8 GPUs, 32 EFAs, 4 on each GPU's root: 5 EFAs and a GPU on one root cannot be allocated.
    assert len(gpus["spec"]["devices"]) == 8 and len(roots) == 32 and set(roots) == gpu_roots
    assert max(roots.count(r) for r in gpu_roots) == 4
    classes = {c["metadata"]["name"]: c for c in stand_in.device_classes()}
    assert classes.keys() == {"gpu.nvidia.com", "efa.networking.k8s.aws"}
    # the same classes the suite applies (one file): what the real scheduler matches the devices by
    assert {n: c["spec"] for n, c in classes.items()} == {
        c["metadata"]["name"]: c["spec"] for c in render(dra.DEVICE_CLASSES_TEMPLATE, {"Labels": LABELS})}


def test_upstreams_wait_for_a_driver_is_its_daemonset_scheduled_and_ready():
    """Without JUDGE_STRICT the set-up goes on once a driver's DaemonSet is Ready, upstream's criterion,
    though its ResourceSlices are not all there yet."""
    assert dra.daemonset_ready({"status": {"desiredNumberScheduled": 2, "numberReady": 2}})
    assert not dra.daemonset_ready({"status": {"desiredNumberScheduled": 2, "numberReady": 1}})
    assert not dra.daemonset_ready({"status": {"desiredNumberScheduled": 0, "numberReady": 0}})  # scheduled nowhere
    assert not dra.daemonset_ready(None)
    assert set(dra.DRIVER_DAEMONSETS) == {dra.GPU_DRIVER, dra.RDMA_DRIVER}


@pytest.mark.parametrize("strict", [False, True])
def test_a_driver_that_publishes_nothing_fails_the_set_up_saying_what_was_asked(strict: bool):
    """No ResourceSlice and no Ready DaemonSet: the wait fails naming the nodes; it speaks of the
    DaemonSet only where it asked for it (without JUDGE_STRICT)."""
    from threading import Event
    from types import SimpleNamespace

    cancelled = Event()
    cancelled.set()  # ends the wait at its first round
    cluster = SimpleNamespace(list=lambda resource: {"items": []}, get=lambda resource, name, namespace: None)
    t = SimpleNamespace(cfg=SimpleNamespace(judge_strict=strict), cluster=cluster, cancel=cancelled, session=None)
    with pytest.raises(TestFailure) as failed:
        dra.wait_published(t, dra.RDMA_DRIVER, ("node-a",), "kube-system", "dranet")  # type: ignore[arg-type]
    message = str(failed.value)
    assert message.startswith("dra.net (DaemonSet kube-system/dranet) publishes no device (no ResourceSlice of driver "
                              "dra.net) on node-a after 300s"), message
    assert ("its DaemonSet is not Ready" in message) is not strict, message
