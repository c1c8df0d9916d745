#!/usr/bin/env bash
# Installs everything the tests and the main job need on a fresh machine (idempotent): the
# system commands (hack/system-packages.sh: openssl, patch, OpenMPI, Chromium, from Debian's
# packages), the project's virtual environment (.venv, with the workloads and dev extras; torch
# comes from pip's cache after the first install) and the Go binaries of the local cluster (cached
# by version outside the repo, see hack/build-binaries.sh).
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
log "building or reusing the Go binaries"
bash hack/build-binaries.sh >&2
echo "$repo/.venv/bin"
