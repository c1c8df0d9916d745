"""upstream's GPU node suites (nvidia-driver-liveness.test ... nvidia-inference.test) through the
real kubetest2 on the local cluster's kwok p5 nodes: upstream's CI line of each, unchanged but for
the image, passes with healthy canned logs (localcluster/emulation/canned_logs/gpu-node-checks) and
fails with broken ones (gpu-node-checks-broken) naming the node and the assertion. The pods, the
per-node Jobs, the log capture and the verdict are the real ones; the scripts' output is canned."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import CANNED_LOG_ANNOTATION as CANNED
from ..kubetest2_runs import UPSTREAM_TEST_IMAGE, assert_judged_as_declared, case_properties, junit_cases, kubetest2

pytestmark = pytest.mark.integration

# upstream's CI line of each suite (its required flags), and its tests with the assertion the broken log fails.
LINES = {
    "nvidia-driver-liveness": (("--nodeType=p5.48xlarge", "--expectedDriverVersion=580"),
                               {"TestDriverLiveness": ("driver_liveness", "FAIL 1.5")}),
    "nvidia-cuda-compute": ((), {"TestCUDACompute": ("cuda_compute", "FAIL UnifiedMemoryPerf")}),
    "nvidia-fabric-manager": (("--nodeType=p5.48xlarge",),
                              {"TestFabricManagerVersionMatchesDriver": ("fabric_manager_version", "FAIL 5.2"),
                               "TestFabricAndNVLinkInContainer": ("fabric_nvlink", "FAIL 5.3")}),
    "nvidia-gsp-firmware": (("--nodeType=p5.48xlarge",), {"TestGSPFirmware": ("gsp_firmware", "FAIL 1.9b")}),
    "nvidia-persistence-device-nodes": ((), {"TestDeviceNodes": ("device_nodes", "FAIL 7.3")}),
    "nvidia-shared-libraries": ((), {"TestSharedLibraries": ("shared_libraries", "FAIL libnvidia-ml.so.1")}),
}


@pytest.fixture(scope="module")
def p5(cluster: LocalCluster) -> Iterator[LocalCluster]:
    cluster.set_nodes("p5", 2)
    try:
        yield cluster
    finally:
        ensure_default_nodes(cluster)


def run(cluster: LocalCluster, artifacts: Path, folder: str, canned: str, *extra: str):
    flags, _ = LINES.get(folder, ((), {}))
    done = kubetest2(cluster, artifacts, "exec", f"{folder}.test", "--test.v", *flags, *extra,
                     env={"ACCELERATOR": "nvidia", "POD_ANNOTATIONS": f"{CANNED}={canned}"})
    return done, junit_cases(artifacts, f"e2e-{folder}")


@pytest.mark.parametrize("folder", sorted(LINES))
def test_upstreams_ci_line_passes_on_healthy_gpu_nodes(p5: LocalCluster, tmp_path: Path, folder: str):
    done, cases = run(p5, tmp_path / "artifacts", folder, "gpu-node-checks", f"--nvidiaTestImage={UPSTREAM_TEST_IMAGE}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tests = LINES[folder][1]
    assert set(cases) == set(tests), sorted(cases)
    for name, (check, _) in tests.items():
        props = case_properties(cases[name])
        judged = {k: v for k, v in props.items() if k.startswith(f"check.{check}.")}
        assert judged and all(v.startswith("pass: ") for v in judged.values()), props
        assert props["execution"] == "canned", props
        assert_judged_as_declared(name, cases[name])


@pytest.mark.parametrize("folder", sorted(LINES))
def test_a_broken_node_fails_the_test_naming_it(p5: LocalCluster, tmp_path: Path, folder: str):
    done, cases = run(p5, tmp_path / "artifacts", folder, "gpu-node-checks-broken",
                      f"--nvidiaTestImage={UPSTREAM_TEST_IMAGE}")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    for name, (check, assertion) in LINES[folder][1].items():
        case = cases[name]
        assert not case.is_passed, name
        message = case.result[0].message
        assert f"{check} on node kwok-p5-0: {assertion}" in message, message


def test_upstreams_inference_line_runs_and_without_its_image_fails_naming_the_flag(p5: LocalCluster, tmp_path: Path):
    done, cases = run(p5, tmp_path / "ok", "nvidia-inference", "gpu-node-checks",
                      f"--bertInferenceImage={UPSTREAM_TEST_IMAGE}", "--inferenceMode=throughput")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert cases["TestBertInference"].is_passed
    rendered = (tmp_path / "ok" / "e2e-nvidia-inference" / "TestBertInference" / "manifests"
                / "per-node-job.yaml").read_text()
    assert "infer.py" in rendered and "INFERENCE_MODE" in rendered and "nvidia.com/gpu: 1" in rendered
    done, cases = run(p5, tmp_path / "no-image", "nvidia-inference", "gpu-node-checks")
    assert done.returncode == 1
    assert "--bertInferenceImage (or BERT_INFERENCE_IMAGE) must be set" in cases["TestBertInference"].result[0].message


# upstream's nvidia-dra CI line (its required flags; the dranet image is never pulled here: the local
# cluster's DRA stand-in publishes the drivers' devices, localcluster/emulation/dra.py). The negative
# test case's 2 minutes of upstream's stabilization, shortened by the environment, not the line.
DRA_LINE = ("--nodeType=p5.48xlarge", "--rdmaDeviceDraDriverImage=registry.k8s.io/networking/dranet:stable",
            f"--containerTestImage={UPSTREAM_TEST_IMAGE}")
DRA_ENV = {"DRA_PENDING_STABILIZATION": "5s"}
POSITIVE = "TestNvidiaDRAMultiNode/all-efas-all-gpus"
NEGATIVE = "TestNvidiaDRAMultiNode/five-efas-one-gpu-negative-test"


def run_dra(cluster: LocalCluster, artifacts: Path, canned: str, *line: str):
    done = kubetest2(cluster, artifacts, "exec", "nvidia-dra.test", "--test.v", *line,
                     env={"ACCELERATOR": "nvidia", "POD_ANNOTATIONS": f"{CANNED}={canned}", **DRA_ENV})
    return done, junit_cases(artifacts, "e2e-nvidia-dra")


def test_upstreams_dra_line_passes_with_claims_the_real_scheduler_allocated(p5: LocalCluster, tmp_path: Path):
    done, cases = run_dra(p5, tmp_path / "artifacts", "gpu-node-checks", *DRA_LINE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert set(cases) == {"TestGPUPresentLabel", "TestNvidiaDRAMultiNode", POSITIVE, NEGATIVE}, sorted(cases)
    assert cases["TestGPUPresentLabel"].is_skipped  # no --autoModeEnabled: upstream's skip
    props = case_properties(cases[POSITIVE])
    assert props["execution"] == "canned", props
    # the kube-scheduler allocated each worker's claims from the stand-in's ResourceSlices: all of a p5's devices
    for worker in ("multi-node-nccl-test-worker-0", "multi-node-nccl-test-worker-1"):
        assert (props[f"dra.{worker}.gpus_allocated"], props[f"dra.{worker}.efa_allocated"]) == ("8", "32"), props
    efa = [v for k, v in props.items() if k.startswith("check.dra.efa.")]
    assert len(efa) == 2 and all(v.startswith("pass: ") for v in efa), props
    assert_judged_as_declared(POSITIVE, cases[POSITIVE])
    mpijob = (tmp_path / "artifacts" / "e2e-nvidia-dra" / "TestNvidiaDRAMultiNode" / "all-efas-all-gpus" / "manifests"
              / "mpijob.yaml").read_text()
    assert "resourceClaimTemplateName: rct-all-gpus" in mpijob and "nvidia.com/gpu: " not in mpijob
    # the negative case: the scheduler could not put 5 EFAs and a GPU on one PCIe root of any node
    negative = case_properties(cases[NEGATIVE])["check.dra.unschedulable"]
    assert negative.startswith("pass: 2 workers unschedulable: ") and "claim" in negative, negative
    labels = p5.kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name")
    assert labels.strip() == "", labels  # the label the suite added is gone with the run


def test_dra_names_the_node_whose_nccl_did_not_use_its_claimed_efas(p5: LocalCluster, tmp_path: Path):
    done, cases = run_dra(p5, tmp_path / "artifacts", "gpu-node-checks-broken", *DRA_LINE,
                          "--test.run=TestNvidiaDRAMultiNode/all-efas")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    case = cases[POSITIVE]
    result = json.loads((tmp_path / "artifacts" / "e2e-nvidia-dra" / "TestNvidiaDRAMultiNode" / "all-efas-all-gpus"
                         / "result.json").read_text())
    (node,) = [pod["node"] for pod in result["pods"] if pod["name"] == "multi-node-nccl-test-worker-0"]
    message = case.result[0].message
    assert f"dra.efa on node {node}: NCCL on multi-node-nccl-test-worker-0 selected no EFA provider" in message, message


def test_the_dra_line_without_its_dranet_image_fails_naming_the_flag(p5: LocalCluster, tmp_path: Path):
    done, cases = run_dra(p5, tmp_path / "artifacts", "gpu-node-checks", "--nodeType=p5.48xlarge",
                          f"--containerTestImage={UPSTREAM_TEST_IMAGE}", "--test.run=TestNvidiaDRAMultiNode/all-efas")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    assert "-rdmaDeviceDraDriverImage is required" in cases[POSITIVE].result[0].message
