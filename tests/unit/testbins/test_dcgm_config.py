"""TestDcgmDiagnostics as upstream's since #806: dcgmi runs with a per-SKU `-c dcgm-diag.yaml` that
allows the L4's x8 PCIe link (else DCGM_FR_PCIE_WIDTH on single-GPU g6 sizes), in --nvidiaTestImage.

The script runs here with stand-in `dcgmi` and `nv-hostengine` that record their arguments: what
dcgmi is given, and the config file it reads, are the script's own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness.config.settings import DCGM_IMAGE, resolve
from harness.errors import TestFailure
from harness.framework.cli import parse_args
from testbins.nvidia.dcgm import DCGM_ENV, DCGM_SCRIPT, dcgm_image

STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
case "$*" in *diag*) echo '{"DCGM GPU Diagnostic": {"test_categories": []}}' ;; esac
"""


def test_dcgmi_reads_a_per_sku_config_letting_the_l4_run_at_x8(tmp_path: Path):
    upstream_config = re.search(r"^config=(\S+)$", DCGM_SCRIPT, re.MULTILINE)[1]  # upstream's image has it
    assert not Path(upstream_config).exists()  # so the script writes its own copy
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("dcgmi", "nv-hostengine"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "TMPDIR": str(tmp_path),
           "DCGM_DIAG_LEVEL": "4", **DCGM_ENV}
    done = subprocess.run(["bash", "-c", DCGM_SCRIPT], env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    config = tmp_path / "dcgm-diag.yaml"
    assert f"dcgmi diag -r 4 -j -c {config}" in calls.read_text().splitlines()
    assert done.stdout.splitlines()[-1] == "dcgmi exit status: 0"
    doc = yaml.safe_load(config.read_text())
    assert doc["spec"] == "dcgm-diag-v1"
    [l4] = doc["skus"]  # only models AWS wires below x16; every other keeps DCGM's defaults
    assert (l4["name"], str(l4["id"])) == ("NVIDIA L4", "27b8")
    for subtest in ("h2d_d2h_single_pinned", "h2d_d2h_single_unpinned"):
        assert l4["pcie"][subtest] == {"min_pci_generation": 1.0, "min_pci_width": 8.0}


def ctx(*argv: str, invoked_as: str = "", env: dict[str, str] | None = None) -> Any:
    cfg = resolve(parse_args(list(argv)), env or {})
    return SimpleNamespace(cfg=cfg, name="TestDcgmDiagnostics",
                           session=SimpleNamespace(invoked_as=invoked_as, binary="e2e-nvidia"))


def test_it_runs_in_nvidia_test_image_as_upstreams():
    assert dcgm_image(ctx("--nvidiaTestImage=repo/nvidia:1", invoked_as="nvidia.test")) == "repo/nvidia:1"
    with pytest.raises(TestFailure, match="--nvidiaTestImage .*is empty"):
        dcgm_image(ctx("--nvidiaTestImage=", invoked_as="nvidia.test"))
    with pytest.raises(TestFailure, match="needs --nvidiaTestImage"):
        dcgm_image(ctx(invoked_as="nvidia.test"))


def test_dcgm_image_wins_and_our_nccl_image_without_dcgm_gets_nvidias():
    assert dcgm_image(ctx("--nvidiaTestImage=repo/nvidia:1", env={"DCGM_IMAGE": "repo/dcgm:2"})) == "repo/dcgm:2"
    assert dcgm_image(ctx()) == DCGM_IMAGE
