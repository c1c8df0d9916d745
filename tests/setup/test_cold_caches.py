"""The set-up steps that locate or patch Go module sources work from an empty module cache.

A warm module cache once hid a missing download: `go list -m -f '{{.Dir}}'` prints an empty string
(and exits 0) for a module not yet downloaded, and `hack/main-job` failed on a fresh machine.
`hack/build-binaries.sh sources DIR` runs exactly the download, locate and patch steps of every
tool it patches or reads files from (kwok's patch, mpi-operator's loopback overlay, both CRDs),
without compiling; here it runs with GOMODCACHE in a new temporary folder, so a machine whose
cache is warm still catches what a cold one would hit. It needs the Go module proxy (seconds).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "build-binaries.sh"


def cold_env(module_cache: Path) -> dict[str, str]:
    # -modcacherw: the module cache's files are read-only by default, and pytest must delete it.
    return {**os.environ, "GOMODCACHE": str(module_cache), "GOFLAGS": "-modcacherw"}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cold")
    module_cache, out = root / "gomodcache", root / "sources"
    module_cache.mkdir()
    done = subprocess.run(["bash", str(BUILD), "sources", str(out)], env=cold_env(module_cache),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"build-binaries.sh sources failed from an empty module cache:\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == str(out)
    return out


def test_kwok_source_is_downloaded_and_patched(prepared: Path):
    patched = prepared / "kwok-build" / "kwok" / "pkg" / "kwok" / "server" / "debugging_logs.go"
    assert "runtimeServiceStub{logsFile: logsFile}" in patched.read_text()
    go_mod = (prepared / "kwok-build" / "go.mod").read_text()
    assert "replace sigs.k8s.io/kwok => ./kwok" in go_mod


def test_mpi_operator_overlay_listens_on_loopback(prepared: Path):
    overlay = prepared / "mpi-operator-overlay"
    server = (overlay / "server.go").read_text()
    assert "Addr:    loopbackHealthCheckAddress()," in server
    assert 'fmt.Sprintf(":%d", healthCheckPort)' not in server
    assert "kubetest2-training/hack/go/mpi-operator/loopback/app" in (overlay / "main.go").read_text()
    assert str(overlay / "server.go") in (overlay / "overlay.json").read_text()


@pytest.mark.parametrize("crd", ["kwok.x-k8s.io_logs.yaml", "kubeflow.org_mpijobs.yaml"])
def test_crds_are_copied_out_of_the_modules(prepared: Path, crd: str):
    text = (prepared / "crds" / crd).read_text()
    assert "kind: CustomResourceDefinition" in text
    assert (prepared / "crds" / crd).stat().st_mode & 0o777 == 0o644


def test_locating_without_downloading_finds_nothing(tmp_path: Path):
    """Why the download step exists: `go list -m` names no folder for a module not yet downloaded."""
    located = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubeflow/mpi-operator"],
                             cwd=REPO / "hack" / "go" / "mpi-operator", env=cold_env(tmp_path),
                             capture_output=True, text=True, timeout=300, check=False)
    assert located.returncode == 0 and located.stdout.strip() == "", located
