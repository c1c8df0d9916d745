"""Upstream's binary names (nvidia.test, nvidia-training.test) run upstream's tests alone by default,
with or without -test.run, as upstream's binary would; this project's tests run under them only when
-test.run names them, and always under this project's names (e2e-nvidia, e2e-nvidia-training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.framework.suite import names_explicitly
from harness.runner import main
from testbins.e2e_nvidia import SUITE as NVIDIA
from testbins.e2e_nvidia_training import SUITE as TRAINING

# Upstream aws-k8s-tester's tests (test/cases/nvidia and nvidia-training; shared/REFERENCE.md §9; the
# two deadline tests of dcgm_deadline_test.go at 6ec68ca6, which carries no build tag).
UPSTREAM_NVIDIA = ["TestMPIJobPytorchTraining", "TestSingleNodeUnitTest", "TestNvidiaDriverCapabilities",
                   "TestDcgmDiagnostics", "TestDcgmDiagDeadlineSeconds", "TestDcgmDiagDeadlineAlwaysPositive",
                   "TestContainerdConfig", "TestTimeSlicing", "TestMps"]
UPSTREAM_TRAINING = ["TestBertTraining"]


def lines(capsys: pytest.CaptureFixture[str], called: str, *args: str) -> list[str]:
    suite = NVIDIA if "training" not in called else TRAINING
    assert main(suite, list(args), called=called) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture(autouse=True)
def artifacts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ARTIFACTS", str(tmp_path))


def dry_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, called: str, *args: str) -> set[str]:
    out = lines(capsys, called, "--dry-run", *args)
    return {line.split()[0].split("/")[0] for line in out if line.startswith("  Test")}


@pytest.mark.parametrize("pattern", [".*", "Test", "^Test", "."])
def test_upstream_names_list_upstreams_tests_alone(capsys: pytest.CaptureFixture[str], pattern: str):
    assert lines(capsys, "nvidia.test", f"--test.list={pattern}") == UPSTREAM_NVIDIA
    assert lines(capsys, "nvidia-training.test", f"--test.list={pattern}") == UPSTREAM_TRAINING


def test_our_names_list_every_test(capsys: pytest.CaptureFixture[str]):
    listed = lines(capsys, "e2e-nvidia", "--test.list=.*")
    assert set(UPSTREAM_NVIDIA) < set(listed)
    assert {"TestNCCLAllReduce", "TestNCCLTests", "TestGPUCapacity", "TestNodePairs"} <= set(listed)
    assert lines(capsys, "e2e-nvidia-training", "--test.list=.*") == [
        "TestBertTraining", "TestNanoGPTTraining", "TestMNISTTraining", "TestElasticRecovery"]


def test_a_pattern_naming_ours_lists_them_under_upstreams_names(capsys: pytest.CaptureFixture[str]):
    assert lines(capsys, "nvidia.test", "--test.list=TestNCCL") == ["TestNCCLAllReduce", "TestNCCLTests"]
    assert lines(capsys, "nvidia-training.test", "--test.list=TestBertTraining|TestNanoGPTTraining") == [
        "TestBertTraining", "TestNanoGPTTraining"]


def test_upstream_names_without_test_run_run_upstreams_tests_alone(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path):
    assert dry_run(capsys, tmp_path, "nvidia.test") == set(UPSTREAM_NVIDIA)
    assert dry_run(capsys, tmp_path, "nvidia-training.test") == set(UPSTREAM_TRAINING)
    # upstream's harnesses call the binary with --skip-features only (its DCGM test says so)
    assert dry_run(capsys, tmp_path, "nvidia.test", "--skip-features=dcgm-diag") == set(UPSTREAM_NVIDIA) - {
        "TestDcgmDiagnostics"}
    assert dry_run(capsys, tmp_path, "nvidia.test", "--test.run=.*") == set(UPSTREAM_NVIDIA)


def test_test_run_naming_ours_runs_them_under_upstreams_names(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    assert dry_run(capsys, tmp_path, "nvidia.test", "--test.run=TestGPUCapacity") == {"TestGPUCapacity"}
    assert dry_run(capsys, tmp_path, "nvidia-training.test", "--test.run=^TestNanoGPTTraining$") == {
        "TestNanoGPTTraining"}
    assert dry_run(capsys, tmp_path, "nvidia.test", "--test.run=^TestMPIJobPytorchTraining$/multi-node") == {
        "TestMPIJobPytorchTraining"}


def test_our_names_run_every_test_by_default(capsys: pytest.CaptureFixture[str], tmp_path: Path):
    assert dry_run(capsys, tmp_path, "e2e-nvidia-training") == {
        "TestBertTraining", "TestNanoGPTTraining", "TestMNISTTraining", "TestElasticRecovery"}
    assert {"TestNCCLAllReduce", "TestNodePairs"} <= dry_run(capsys, tmp_path, "e2e-nvidia")


def test_help_under_upstreams_name_says_which_tests_run(capsys: pytest.CaptureFixture[str]):
    text = "\n".join(lines(capsys, "nvidia.test", "--help"))
    assert "Usage: nvidia.test (upstream's name of e2e-nvidia" in text
    assert "TestNodePairs  (this project's: only when -test.run names it)" in text


@pytest.mark.parametrize(("pattern", "named"), [
    ("", False), (".*", False), ("Test", False), ("^Test.*$", False), ("TestNCCL", True),
    ("^TestNCCLTests$/multi-node", True), ("TestBertTraining|TestNanoGPTTraining", True), ("Bert", False)])
def test_names_explicitly(pattern: str, named: bool):
    assert names_explicitly(pattern, "TestNCCLTests" if "Bert" not in pattern else "TestNanoGPTTraining") is named
