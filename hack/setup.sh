#!/usr/bin/env bash
# Installs everything the tests and the main job need on a fresh machine (idempotent): the
# system commands (hack/system-packages.sh: openssl, patch, OpenMPI, Chromium, from Debian's
# packages), the project's virtual environment (.venv, with the workloads and dev extras; torch
# comes from pip's cache after the first install) and the Go binaries of the local cluster (cached
# by version outside the repo, see hack/build-binaries.sh).
#   hack/setup.sh [--real-nodes] [--images NAME[,NAME...]]
# --real-nodes also builds what real nodes run (kubelet, kube-proxy, CoreDNS); --images builds those
# images (hack/images, cached by their inputs) in the background while the venv and the Go binaries
# are made: on a cold machine the image build waits on downloads and disk as much as on the cores,
# so the two overlap instead of adding up. Each step's time is logged on stderr.
# Prints the venv's bin folder on its last line.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
log() { echo "[setup $(date +%H:%M:%S)] $*" >&2; }
usage() { echo "usage: hack/setup.sh [--real-nodes] [--images NAME[,NAME...]]" >&2; exit 2; }

binaries_args=() images=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --real-nodes) binaries_args+=(--real-nodes); shift ;;
    --images) [[ $# -ge 2 && -n $2 ]] || usage; images=${2//,/ }; shift 2 ;;
    *) echo "hack/setup.sh: unknown argument $1" >&2; usage ;;
  esac
done

t0=$SECONDS
bash hack/system-packages.sh
log "system packages ready ($((SECONDS - t0))s)"

images_pid="" images_log=""
if [[ -n $images ]]; then
  images_log=$(mktemp -t kt2t-images.XXXXXX)
  log "building or reusing the images ($images) in the background, log: $images_log"
  # shellcheck disable=SC2086 # one word per image
  (t=$SECONDS; hack/images build $images >"$images_log" 2>&1; rc=$?
   echo "[setup] images ($images): exit $rc after $((SECONDS - t))s" >>"$images_log"; exit $rc) &
  images_pid=$!
fi

python=${PYTHON:-python3}
t0=$SECONDS
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
log "venv ready ($((SECONDS - t0))s)"

t0=$SECONDS
log "building or reusing the Go binaries"
bash hack/build-binaries.sh "${binaries_args[@]}" >&2
log "Go binaries ready ($((SECONDS - t0))s)"

if [[ -n $images_pid ]]; then
  t0=$SECONDS
  if ! wait "$images_pid"; then
    tail -n 40 "$images_log" >&2
    log "the image build failed (above: the end of $images_log)"
    exit 1
  fi
  log "images ready ($((SECONDS - t0))s more after the Go binaries): $(tail -n 1 "$images_log")"
  rm -f "$images_log"
fi
echo "$repo/.venv/bin"
