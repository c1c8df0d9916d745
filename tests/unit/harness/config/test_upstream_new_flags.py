"""Upstream's newer flags (issue 23 item 14): --timeSlicingEnabled (#813), --mpsEnabled (#817) and
TestDcgmDiagnostics' --dcgmDiagEnabled, --dcgmDiagLevel, --dcgmDiagTimeoutMinutes are accepted
(upstream's lines no longer exit 2), listed, and TestDcgmDiagnostics, TestTimeSlicing and TestMps
are opt-in as upstream's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.settings import resolve
from harness.errors import ConfigError
from harness.framework.cli import parse_args

BINARY = str(Path(sys.executable).parent / "e2e-nvidia")
NEW = ["--timeSlicingEnabled", "--mpsEnabled", "--dcgmDiagEnabled", "--dcgmDiagLevel=3", "--dcgmDiagTimeoutMinutes=90"]


def test_the_five_flags_are_accepted_and_listed_with_the_test():
    listed = subprocess.run([BINARY, "--test.list=.*", *NEW], capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    assert {"TestDcgmDiagnostics", "TestTimeSlicing", "TestMps"} <= set(listed.stdout.split())
    helped = subprocess.run([BINARY, "--help"], capture_output=True, text=True, timeout=60, check=False)
    for flag in ("timeSlicingEnabled", "mpsEnabled", "dcgmDiagEnabled", "dcgmDiagLevel", "dcgmDiagTimeoutMinutes"):
        assert f"-{flag}" in helped.stdout + helped.stderr, flag


def test_values_and_warnings():
    cfg = resolve(parse_args(NEW), {})
    assert (cfg.dcgm_diag_enabled, cfg.dcgm_diag_level, cfg.dcgm_diag_timeout_minutes) == (True, "3", 90)
    # The sharing flags have their effect now: no warning that they have none.
    assert cfg.ignored_flags == ()
    assert (cfg.time_slicing_enabled, cfg.mps_enabled) == (True, True)
    default = resolve(parse_args([]), {})
    assert (default.dcgm_diag_enabled, default.dcgm_diag_level) == (False, "4")
    assert (default.time_slicing_enabled, default.mps_enabled, default.gpu_sharing_replicas) == (False, False, 4)
    from_env = resolve(parse_args([]), {"TIME_SLICING_ENABLED": "true", "MPS_ENABLED": "1",
                                        "GPU_SHARING_REPLICAS": "10"})
    assert (from_env.time_slicing_enabled, from_env.mps_enabled, from_env.gpu_sharing_replicas) == (True, True, 10)
    with pytest.raises(ConfigError, match="GPU_SHARING_REPLICAS='1' is invalid: expected a whole number >= 2"):
        resolve(parse_args([]), {"GPU_SHARING_REPLICAS": "1"})
    with pytest.raises(ConfigError, match="dcgmDiagLevel='5' is invalid: expected 1, 2, 3 or 4"):
        resolve(parse_args(["--dcgmDiagLevel=5"]), {})
