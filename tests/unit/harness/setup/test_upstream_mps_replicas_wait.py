"""upstream's TestMps name (TestMPS still selects it), its --timeSlicingReplicas / --mpsReplicas flags
(at least 2, each winning over GPU_SHARING_REPLICAS for its mode) and the unit test's 60-minute wait
(#766) with the per-node Job's deadline past it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness.config.settings import resolve
from harness.errors import ConfigError
from harness.framework.cli import parse_args
from harness.jobs.gpu_sharing import sharing_replicas
from harness.jobs.workload import Workload
from harness.runner import main
from harness.setup.gpu_sharing import MPS, TIME_SLICING
from testbins.e2e_nvidia import SUITE
from testbins.nvidia.unit import UNIT_TEST_WAIT_SECONDS, unit_test_wait

from ...harness.cluster.test_rendering import objects, placement


def selected(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
             *args: str) -> list[str]:
    monkeypatch.setenv("ARTIFACTS", str(tmp_path))
    assert main(SUITE, ["--dry-run", *args], called="nvidia.test") == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  Test")]


@pytest.mark.parametrize("pattern", ["TestMps", "^TestMps$", "^TestMPS$", "TestMps/mps"])
def test_testmps_is_upstreams_name_and_testmps_caps_an_alias(capsys, monkeypatch, tmp_path, pattern: str):
    assert selected(capsys, monkeypatch, tmp_path, f"--test.run={pattern}") == ["TestMps"]


def test_the_alias_also_skips_and_lists(capsys, monkeypatch, tmp_path):
    assert "TestMps" not in selected(capsys, monkeypatch, tmp_path, "--test.skip=TestMPS")
    assert main(SUITE, ["--test.list=TestMPS"], called="nvidia.test") == 0
    assert capsys.readouterr().out.split() == ["TestMps"]


def cfg(*argv: str, env: dict[str, str] | None = None):
    return resolve(parse_args(list(argv)), env or {})


def test_replica_flags_win_for_their_mode_and_fall_back_to_gpu_sharing_replicas():
    both = cfg("--mpsReplicas=3", "--timeSlicingReplicas", "5", env={"GPU_SHARING_REPLICAS": "6"})
    assert (sharing_replicas(both, MPS), sharing_replicas(both, TIME_SLICING)) == (3, 5)
    only_mps = cfg("--mpsReplicas=2", env={"GPU_SHARING_REPLICAS": "6"})
    assert (sharing_replicas(only_mps, MPS), sharing_replicas(only_mps, TIME_SLICING)) == (2, 6)
    assert sharing_replicas(cfg(), MPS) == 4


@pytest.mark.parametrize("flag", ["--mpsReplicas=1", "--timeSlicingReplicas=0", "--mpsReplicas=two"])
def test_replicas_below_two_are_a_configuration_error_naming_the_flag(flag: str):
    with pytest.raises(ConfigError, match=flag.split("=", maxsplit=1)[0]):
        cfg(flag)


def test_unit_test_waits_upstreams_60_minutes_and_its_job_deadline_is_past_that():
    assert unit_test_wait(cfg()) == UNIT_TEST_WAIT_SECONDS == 3600
    assert unit_test_wait(cfg(env={"JOB_TIMEOUT": "2m"})) == 120  # set: the user's
    workload = Workload("unit-test-job", binary="/bin/bash", image="repo/nccl:1", launcher="per-node", nodes=1,
                        timeout=unit_test_wait(cfg()))
    where = replace(placement(nodes=("n0",)), job_timeout=workload.timeout)
    (job,) = objects("per-node", workload, where)
    assert job["spec"]["activeDeadlineSeconds"] > 3600
