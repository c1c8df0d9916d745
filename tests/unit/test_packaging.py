"""Dockerfile.kubetest2's Python stage, performed for real (Docker cannot run here).

The stage copies the packages and installs the distribution without the workloads extra into a
fresh virtual environment; this test does the same and runs each binary's --help from it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
BINARIES = ("e2e-nvidia-training", "e2e-nvidia", "kubetest2-tester-training", "nvidia.test", "nvidia-training.test")


def dockerfile_copies() -> list[str]:
    text = (REPO / "Dockerfile.kubetest2").read_text()
    return [src.rstrip("/") for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE)
            for src in line.split()[:-1]]


def test_dockerfile_copies_every_package_and_the_kubetest2_module():
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = dockerfile_copies()
    for package in packages:
        top = package.split(".")[0]  # a subpackage (harness.*) comes with its top-level folder
        assert top in copied, f"Dockerfile.kubetest2 does not COPY {top}/ (package {package})"
    assert "hack/go/kubetest2" in copied
    assert {"pyproject.toml", "README.md"} <= set(copied)


@pytest.mark.timeout(600)
def test_python_stage_installs_without_torch_and_binaries_answer_help(tmp_path):
    # Lay out only what the Dockerfile copies, so a file it forgets makes this fail.
    src = tmp_path / "src"
    for path in dockerfile_copies():
        if path.startswith("hack/"):
            continue
        origin = REPO / path
        if origin.is_dir():
            shutil.copytree(origin, src / path, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(origin, src / path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(src)], check=True, timeout=540)
    for binary in BINARIES:
        done = subprocess.run([str(env_dir / "bin" / binary), "--help"], capture_output=True, text=True,
                              check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Usage:")
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            text=True, check=True).stdout.lower()
    assert "torch==" not in listed and "transformers==" not in listed
    # The manifests and threshold table ship as package data.
    check = ("from harness.cluster.manifests import template_text; from harness.verdict.thresholds import node_type; "
             "template_text('torchrun-job.yaml'); template_text('addons/mpi-operator.yaml'); "
             "print(node_type('p5.48xlarge').busbw_floors[('single-node', 'all_reduce')][0].gbps)")
    done = subprocess.run([str(python), "-c", check], capture_output=True, text=True, check=True,
                          cwd=tmp_path)
    assert done.stdout.strip() == "460.0"


def test_sys_executable_is_the_project_venv():
    # The other tests run binaries next to sys.executable; make the assumption explicit.
    assert (Path(sys.executable).parent / "e2e-nvidia-training").exists()
