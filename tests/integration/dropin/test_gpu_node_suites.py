"""upstream's GPU node suites (nvidia-driver-liveness.test ... nvidia-inference.test) through the
real kubetest2 on the local cluster's kwok p5 nodes: upstream's CI line of each, unchanged but for
the image, passes with healthy canned logs (localcluster/emulation/canned_logs/gpu-node-checks) and
fails with broken ones (gpu-node-checks-broken: each pod exits with its script's code, so upstream's
verdict fails too) naming the node and the assertion. A run upstream passes and only this project's
stricter checks fail (gpu-node-checks-upstream-passes) passes by default, the checks recorded as
informational, and fails with JUDGE_STRICT. The pods, the per-node Jobs, the log capture and the
verdict are the real ones; the scripts' output is canned."""

from __future__ import annotations

import json
import re
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


def run(cluster: LocalCluster, artifacts: Path, folder: str, canned: str, *extra: str,
        env: dict[str, str] | None = None):
    flags, _ = LINES.get(folder, ((), {}))
    done = kubetest2(cluster, artifacts, "exec", f"{folder}.test", "--test.v", *flags, *extra,
                     env={"ACCELERATOR": "nvidia", "POD_ANNOTATIONS": f"{CANNED}={canned}", **(env or {})})
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
        # every pod succeeded, upstream's verdict: each node's log is recorded, deciding nothing by default
        assert judged and all(v.startswith("informational: ") and "; it passes: " in v for v in judged.values()), props
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
        named = re.search(rf"{check} on node (kwok-p5-[01]): {re.escape(assertion)}", message)
        assert named, message
        # upstream's verdict fails as well: the named node's pod exited with the script's code (both nodes
        # are broken; the test ends at the first pod that fails, so the other's may still run)
        pods = json.loads((tmp_path / "artifacts" / f"e2e-{folder}" / name / "result.json").read_text())["pods"]
        assert [pod["phase"] for pod in pods if pod["node"] == named[1]] == ["Failed"], pods


def test_a_log_only_the_stricter_check_fails_is_informational_unless_judge_strict(p5: LocalCluster, tmp_path: Path):
    """The driver-liveness script stops before its last check and its pod succeeds: upstream passes, so
    under its name the run passes with the check recorded as informational; JUDGE_STRICT fails it."""
    outcomes = {}
    for strict in ("false", "true"):
        outcomes[strict] = run(p5, tmp_path / strict, "nvidia-driver-liveness", "gpu-node-checks-upstream-passes",
                               f"--nvidiaTestImage={UPSTREAM_TEST_IMAGE}", env={"JUDGE_STRICT": strict})
    done, cases = outcomes["false"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    props = case_properties(cases["TestDriverLiveness"])
    assert props["check.driver_liveness.kwok-p5-0"].startswith(
        "informational: upstream's TestDriverLiveness does not judge this (JUDGE_STRICT=true or --judgeStrict makes "
        "it decide); it would fail: driver_liveness on node kwok-p5-0: the check did not finish"), props
    done, cases = outcomes["true"]
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    message = cases["TestDriverLiveness"].result[0].message
    assert "driver_liveness on node kwok-p5-0: the check did not finish" in message, message


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
    assert len(efa) == 2 and all(v.startswith("informational: ") and "; it passes: " in v for v in efa), props
    assert_judged_as_declared(POSITIVE, cases[POSITIVE])
    mpijob = (tmp_path / "artifacts" / "e2e-nvidia-dra" / "TestNvidiaDRAMultiNode" / "all-efas-all-gpus" / "manifests"
              / "mpijob.yaml").read_text()
    assert "resourceClaimTemplateName: rct-all-gpus" in mpijob and "nvidia.com/gpu: " not in mpijob
    # the negative case: the scheduler could not put 5 EFAs and a GPU on one PCIe root of any node
    negative = case_properties(cases[NEGATIVE])["check.dra.unschedulable"]
    assert "; it passes: 2 workers unschedulable: " in negative and "claim" in negative, negative
    labels = p5.kubectl("get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "name")
    assert labels.strip() == "", labels  # the label the suite added is gone with the run


def worker_node(artifacts: Path, worker: str) -> str:
    result = json.loads((artifacts / "e2e-nvidia-dra" / "TestNvidiaDRAMultiNode" / "all-efas-all-gpus"
                         / "result.json").read_text())
    (node,) = [pod["node"] for pod in result["pods"] if pod["name"] == worker]
    return node


def test_dra_names_the_node_whose_rank_failed_the_mpijob(p5: LocalCluster, tmp_path: Path):
    """upstream's verdict, the MPIJob's success, fails: mpirun's first failed rank names its worker's node."""
    done, cases = run_dra(p5, tmp_path / "artifacts", "gpu-node-checks-broken", *DRA_LINE,
                          "--test.run=TestNvidiaDRAMultiNode/all-efas")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    node = worker_node(tmp_path / "artifacts", "multi-node-nccl-test-worker-0")
    message = cases[POSITIVE].result[0].message
    assert f"rank 0 (pod multi-node-nccl-test-worker-0, node {node}) exited first, with code 3" in message, message


def test_dra_records_the_node_whose_nccl_did_not_use_its_claimed_efas(p5: LocalCluster, tmp_path: Path):
    """The job succeeds on sockets where worker 0's claimed EFAs never reached NCCL: upstream passes, so
    dra.efa is informational naming the node; --judgeStrict=true makes it fail the test."""
    outcomes = {}
    for judge in ("", "--judgeStrict=true"):
        outcomes[judge] = run_dra(p5, tmp_path / (judge or "upstream"), "gpu-node-checks-upstream-passes", *DRA_LINE,
                                  "--test.run=TestNvidiaDRAMultiNode/all-efas", *([judge] if judge else []))
    done, cases = outcomes[""]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    node = worker_node(tmp_path / "upstream", "multi-node-nccl-test-worker-0")
    efa = case_properties(cases[POSITIVE])[f"check.dra.efa.{node}"]
    assert efa.startswith("informational: upstream's TestNvidiaDRAMultiNode does not judge this"), efa
    assert f"it would fail: dra.efa on node {node}: NCCL on multi-node-nccl-test-worker-0" in efa, efa
    done, cases = outcomes["--judgeStrict=true"]
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    node = worker_node(tmp_path / "--judgeStrict=true", "multi-node-nccl-test-worker-0")
    message = cases[POSITIVE].result[0].message
    assert f"dra.efa on node {node}: NCCL on multi-node-nccl-test-worker-0 selected no EFA provider" in message, message


def test_the_dra_line_without_its_dranet_image_fails_naming_the_flag(p5: LocalCluster, tmp_path: Path):
    done, cases = run_dra(p5, tmp_path / "artifacts", "gpu-node-checks", "--nodeType=p5.48xlarge",
                          f"--containerTestImage={UPSTREAM_TEST_IMAGE}", "--test.run=TestNvidiaDRAMultiNode/all-efas")
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-4000:]
    assert "-rdmaDeviceDraDriverImage is required" in cases[POSITIVE].result[0].message
