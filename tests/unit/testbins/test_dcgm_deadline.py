"""upstream's dcgm_deadline_test.go (TestDcgmDiagDeadlineSeconds, TestDcgmDiagDeadlineAlwaysPositive):
listed by nvidia.test as upstream's are, run without a cluster, and failing on a deadline that
upstream's cases reject."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.errors import TestFailure
from testbins.nvidia import dcgm

# The suite run as upstream's binary name calls it (harness/runner.py main), in a process of its own.
AS_NVIDIA_TEST = ("import sys; from testbins.e2e_nvidia import SUITE; from harness.runner import main; "
                  "sys.exit(main(SUITE, sys.argv[1:], 'nvidia.test'))")


def nvidia_test(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", AS_NVIDIA_TEST, *args], capture_output=True, text=True, timeout=60,
                          check=False, env=env)


def test_nvidia_test_lists_upstreams_deadline_tests_and_runs_them_without_a_cluster(tmp_path):
    listed = nvidia_test("--test.list=Deadline")
    assert listed.stdout.split() == ["TestDcgmDiagDeadlineSeconds", "TestDcgmDiagDeadlineAlwaysPositive"]
    done = nvidia_test("-test.v", "-test.run=TestDcgmDiagDeadline",
                       env={"ARTIFACTS": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--- PASS: TestDcgmDiagDeadlineSeconds/one_minute_would_render_zero,_so_is_rejected" in done.stdout
    assert "--- PASS: TestDcgmDiagDeadlineAlwaysPositive" in done.stdout


def test_the_deadline_is_a_minute_inside_the_wait_from_two_minutes_on():
    assert [dcgm.deadline_seconds(m) for m in (2, 180)] == [60, 10740]
    with pytest.raises(ValueError, match="at least 2, got 1"):
        dcgm.deadline_seconds(1)


def test_upstreams_cases_fail_on_a_deadline_they_reject(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(dcgm, "deadline_seconds", lambda minutes: minutes * 60 - 60)  # no bound
    with pytest.raises(TestFailure, match=r"dcgmDiagDeadlineSeconds\(1\) = 0, want an error"):
        dcgm.deadline_case(1, None)(None)  # type: ignore[arg-type]
    with pytest.raises(TestFailure, match=r"dcgmDiagDeadlineSeconds\(180\) = 10740, want 10800"):
        dcgm.deadline_case(180, 10800)(None)  # type: ignore[arg-type]
    monkeypatch.setattr(dcgm, "deadline_seconds", lambda minutes: minutes * 60 - 600)  # 10 minutes of slack
    with pytest.raises(TestFailure, match=r"dcgmDiagDeadlineSeconds\(2\) = -480, must be positive"):
        dcgm.test_deadline_always_positive(None)  # type: ignore[arg-type]
