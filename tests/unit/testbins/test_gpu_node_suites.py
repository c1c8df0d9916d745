"""upstream's GPU node suites (nvidia-driver-liveness.test ... nvidia-inference.test): each binary
lists exactly upstream's tests, under upstream's feature and assessment names, accepts every flag of
upstream's binary with its kind and default, and its check script, run here with a stand-in
`nvidia-smi`, passes a healthy node and fails a broken one with upstream's exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster.manifests import script_text
from harness.config.settings import SETTINGS_BY_FLAG, resolve
from harness.framework.cli import parse_args
from harness.verdict.node_checks import NodeLog, judge_node_checks
from testbins.nvidia_node import cuda_compute, device_nodes, driver_liveness, gsp_firmware
from testbins.nvidia_node.common import NodeCheck
from testbins.suites import gpu_node_suites, upstream_gpu_suites

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream-gpu-suites"
SUITES = {suite.aliases[0]: suite for suite in upstream_gpu_suites()}
NODE_SUITES = sorted(suite.aliases[0] for suite in gpu_node_suites())
# upstream's Assess(...) names, test by test, with each test's feature (test/cases/<folder>/*_test.go).
UPSTREAM = {
    "TestDriverLiveness": ("nvidia-driver-liveness", "pod reaches Succeeded"),
    "TestCUDACompute": ("nvidia-cuda-compute", "pod reaches Succeeded"),
    "TestFabricManagerVersionMatchesDriver": ("nvidia-fabric-manager-version-check", "Job pods all succeed"),
    "TestFabricAndNVLinkInContainer": ("nvidia-fabric-nvlink-check", "pod reaches Succeeded"),
    "TestGSPFirmware": ("nvidia-gsp-firmware", "pod reaches Succeeded"),
    "TestDeviceNodes": ("nvidia-persistence-device-nodes", "pod reaches Succeeded"),
    "TestSharedLibraries": ("nvidia-shared-libraries", "all DaemonSet pods are Ready and the DS has at least one pod"),
    "TestBertInference": ("bert-inference", "BERT inference Job succeeds"),
}


def fixture_lines(name: str) -> list[str]:
    return [line for line in (FIXTURES / name).read_text().splitlines() if line and not line.startswith("#")]


def test_every_upstream_gpu_suite_has_a_binary():
    assert sorted(SUITES) == sorted(p.name.removesuffix(".list.txt") for p in FIXTURES.glob("*.list.txt"))


@pytest.mark.parametrize("binary", sorted(SUITES))
def test_test_list_prints_exactly_upstreams_tests(binary):
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.argv[0] = {binary!r}; "
                           f"from testbins.{SUITES[binary].binary.removeprefix('e2e-').replace('-', '_')} import main; "
                           "main()", "--test.list=.*"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == fixture_lines(f"{binary}.list.txt")


@pytest.mark.parametrize("binary", NODE_SUITES)
def test_features_and_assessments_are_upstreams(binary):
    cfg = resolve(parse_args([]), {})
    for test in SUITES[binary].tests:
        assert test.upstream and test.in_place, test.name
        feature = test.features[0]
        assert (feature.name, *feature.assessment_names(cfg)) == UPSTREAM[test.name]
        assert dict(feature.labels) == {"suite": ("nvidia",), "hardware": ("gpu",)}


@pytest.mark.parametrize("binary", sorted(SUITES))
def test_every_flag_of_upstreams_binary_is_accepted_with_its_kind(binary):
    for line in fixture_lines(f"{binary}.txt"):
        name, *kind = line[1:].split()
        setting = SETTINGS_BY_FLAG.get(name)
        assert setting is not None, f"-{name} of upstream's {binary} is not accepted"
        assert setting.is_bool_flag == (not kind), name


def test_new_flags_keep_upstreams_defaults():
    cfg = resolve(parse_args([]), {})
    assert cfg.required_libs == "libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1 libnvidia-cfg.so.1"
    assert cfg.allowed_lib_dirs_regex == r"^/(usr/)?lib(64)?/[^/]+$"
    assert (cfg.inference_mode, cfg.gpu_requested, cfg.expected_driver_version) == ("throughput", 1, None)
    assert cfg.install_device_plugin is True and cfg.efa_enabled is False
    given = resolve(parse_args(["--expectedDriverVersion=580.65.06", "--gpuRequested=2", "--region=us-west-2"]), {})
    assert (given.expected_driver_version, given.gpu_requested) == ("580.65.06", 2)
    assert [flag for flag, _ in given.ignored_flags] == ["--region"]


def test_the_gpu_model_comes_from_the_hardware_table():
    assert driver_liveness.expected_gpu_name("p5.48xlarge") == "H100"
    assert driver_liveness.expected_gpu_name("no-such.type") == ""


# -- the scripts, run here with a stand-in nvidia-smi ------------------------------------------------

# A stand-in nvidia-smi, its output set by SMI_* variables.
FAKE_SMI = Path(__file__).with_name("fake-nvidia-smi.sh")


def run_script(check: NodeCheck, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.read_text())
    smi.chmod(0o755)
    demo = tmp_path / "demo"
    demo.mkdir(exist_ok=True)
    for sample in ("UnifiedMemoryPerf", "immaTensorCoreGemm", "reductionMultiBlockCG", "shfl_scan", "simpleAWBarrier",
                   "simpleAtomicIntrinsics", "simpleVoteIntrinsics", "warpAggregatedAtomicsCG",
                   "globalToShmemAsyncCopy"):
        (demo / sample).write_text(f"#!/bin/sh\n[ \"$BROKEN_SAMPLE\" != {sample} ]\n")
        (demo / sample).chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SMI_DRIVER": "580.65.06",
               "SMI_BROKEN": "", "DEMO_SUITE_DIR": str(demo), **env}
    return subprocess.run(["bash", "-c", script_text(check.script)], env=environ, capture_output=True, text=True,
                          timeout=60, check=False)


def judged(check: NodeCheck, done: subprocess.CompletedProcess[str]) -> str:
    verdict = judge_node_checks(check.kind, [NodeLog("node-a", tuple(done.stdout.splitlines()))], ["node-a"],
                                check.done_line)
    return verdict.checks[0].status.value + ": " + verdict.checks[0].message


def test_driver_liveness_passes_the_expected_branch_and_model(tmp_path: Path):
    done = run_script(driver_liveness.DRIVER_LIVENESS, tmp_path, EXPECTED_DRIVER_VERSION="580",
                      EXPECTED_GPU_NAME="H100")
    assert done.returncode == 0, done.stdout
    assert judged(driver_liveness.DRIVER_LIVENESS, done) == "pass: driver_liveness on node node-a: 3 passed, 0 skipped"


@pytest.mark.parametrize(("env", "code", "named"), [
    ({"SMI_BROKEN": "1"}, 10, "FAIL 1.1"),
    ({"EXPECTED_DRIVER_VERSION": "570.10.01"}, 11, "FAIL 1.5: a GPU reports driver 580.65.06, branch 580, expected "
                                                   "branch 570"),
    ({"EXPECTED_GPU_NAME": "A100"}, 12, "FAIL 1.8: GPU model 'NVIDIA H100 80GB HBM3' does not contain 'A100'"),
])
def test_driver_liveness_fails_with_upstreams_code_naming_the_node(tmp_path: Path, env, code, named):
    done = run_script(driver_liveness.DRIVER_LIVENESS, tmp_path, **env)
    assert done.returncode == code, done.stdout
    assert judged(driver_liveness.DRIVER_LIVENESS, done).startswith(f"fail: driver_liveness on node node-a: {named}")


def test_cuda_compute_runs_every_sample_and_names_the_broken_one(tmp_path: Path):
    assert judged(cuda_compute.CUDA_COMPUTE, run_script(cuda_compute.CUDA_COMPUTE, tmp_path)).startswith(
        "pass: cuda_compute on node node-a: 9 passed")
    old = run_script(cuda_compute.CUDA_COMPUTE, tmp_path, SMI_CC="7.0")  # Volta: the two gated samples skip
    assert "2 skipped" in judged(cuda_compute.CUDA_COMPUTE, old)
    broken = run_script(cuda_compute.CUDA_COMPUTE, tmp_path, BROKEN_SAMPLE="shfl_scan")
    assert broken.returncode == 21
    assert "FAIL shfl_scan: the sample's self-check failed" in judged(cuda_compute.CUDA_COMPUTE, broken)


def test_gsp_firmware_names_a_version_that_is_not_the_drivers(tmp_path: Path):
    params = tmp_path / "params"
    assert run_script(gsp_firmware.GSP_FIRMWARE, tmp_path).returncode == 0
    broken = run_script(gsp_firmware.GSP_FIRMWARE, tmp_path, SMI_GSP="575.1.1")
    assert broken.returncode == 42
    assert "FAIL 1.9b: GSP firmware 575.1.1 is not the driver's 580.65.06" in judged(gsp_firmware.GSP_FIRMWARE, broken)
    assert not params.exists()  # the script reads /host/proc only: no host file was needed here


def test_device_nodes_fail_honestly_where_there_is_no_gpu_device(tmp_path: Path):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has NVIDIA device nodes")
    done = run_script(device_nodes.DEVICE_NODES, tmp_path)
    assert done.returncode == 31, done.stdout
    assert judged(device_nodes.DEVICE_NODES, done) == ("fail: device_nodes on node node-a: FAIL 7.3: no "
                                                       "/dev/nvidia<N> device node in the container")
