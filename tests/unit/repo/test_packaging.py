"""Installing the distribution, performed for real: Dockerfile.kubetest2's Python stage (Docker cannot
run here), and the wheel `python -m build` makes. Each is installed without the workloads extra into a
fresh virtual environment, and each binary's --help runs from it. The metadata a package index shows
(version, license, URLs, classifiers) is checked on the built wheel.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the dev extra installs tomli, the same parser
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[3]
BINARIES = ("e2e-nvidia-training", "e2e-nvidia", "kubetest2-tester-training", "nvidia.test", "nvidia-training.test")


def dockerfile_copy_steps() -> list[tuple[str, str]]:
    """(source, where it lands under WORKDIR) for each file or folder the COPY steps take from the
    build context, as Docker places them: a folder's contents into the destination, a file into a
    destination ending in `/` under its own name, else as the destination."""
    text = (REPO / "Dockerfile.kubetest2").read_text()
    steps = []
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE):
        *sources, dest = line.split()
        for src in (source.rstrip("/") for source in sources):
            into = dest.endswith("/") and not (REPO / src).is_dir()
            steps.append((src, Path(dest, Path(src).name).as_posix() if into else Path(dest).as_posix()))
    return steps


def dockerfile_copies() -> list[str]:
    return [src for src, _ in dockerfile_copy_steps()]


def test_dockerfile_copies_every_package_and_the_kubetest2_module():
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = dockerfile_copies()
    for package in packages:
        top = package.split(".")[0]  # a subpackage (harness.*) comes with its top-level folder
        assert top in copied, f"Dockerfile.kubetest2 does not COPY {top}/ (package {package})"
    assert "hack/go/kubetest2" in copied
    landed = {dest for _, dest in dockerfile_copy_steps()}
    assert {"pyproject.toml", "README.md"} <= landed
    # The project's README is documentation: in the image, its edits would rebuild the image.
    assert "README.md" not in copied, "Dockerfile.kubetest2 copies the project's README (images/kubetest2/README.md)"


@pytest.mark.timeout(600)
def test_python_stage_installs_without_torch_and_binaries_answer_help(tmp_path):
    # Lay out only what the Dockerfile copies, so a file it forgets makes this fail.
    src = tmp_path / "src"
    for path, dest in dockerfile_copy_steps():
        if path.startswith("hack/"):
            continue
        origin = REPO / path
        if origin.is_dir():
            shutil.copytree(origin, src / dest, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (src / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(origin, src / dest)
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


def package_sources(dest: Path) -> Path:
    """What pyproject.toml packages, copied to dest: the build writes build/ and *.egg-info beside its
    sources, which must not land in the checkout."""
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for top in sorted({package.split(".")[0] for package in include}):
        shutil.copytree(REPO / top, dest / top, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    return dest


@pytest.mark.timeout(300)
def test_the_wheel_installs_in_a_fresh_venv_and_its_binaries_answer_help(tmp_path):
    # Built in this venv (--no-isolation: the dev extra has build and setuptools, nothing is
    # downloaded for the build); the fresh venv gets the runtime dependencies from pip's cache or
    # whatever index pip is configured with: no index address is written here.
    src = package_sources(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                    str(src)], check=True, capture_output=True, text=True, timeout=240)
    (wheel,) = (tmp_path / "dist").glob("kubetest2_training-*-py3-none-any.whl")
    metadata = zipfile.ZipFile(wheel).read(next(
        n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))).decode()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"Version: {project['version']}" in metadata
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: kubetest2, https://github.com/kubernetes-sigs/kubetest2" in metadata
    assert "Classifier: Topic :: Software Development :: Testing" in metadata
    assert "Requires-Python: >=3.10" in metadata
    # The scripts the pods run ship beside the templates, and every module of the suites with them.
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {str(path.relative_to(REPO)) for folder in ("manifests/scripts", "testbins")
              for path in (REPO / folder).rglob("*") if path.suffix in (".sh", ".yaml", ".py")}
    assert {"manifests/scripts/dcgm-diag.sh", "testbins/nvidia/mpi.py"} <= wanted
    assert wanted <= shipped, sorted(wanted - shipped)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   timeout=240)
    for binary in BINARIES:
        done = subprocess.run([str(env_dir / "bin" / binary), "--help"], capture_output=True, text=True,
                              check=False, timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Usage:"), done.stdout[:200]
    # The templates and the threshold table are in the wheel, not read from a checkout.
    done = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                           "from harness.cluster.manifests import rbac_objects; "
                           "print(rbac_objects('ns', {})[0]['metadata']['namespace'])"],
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.strip() == "ns"


def test_sys_executable_is_the_project_venv():
    # The other tests run binaries next to sys.executable; make the assumption explicit.
    assert (Path(sys.executable).parent / "e2e-nvidia-training").exists()
