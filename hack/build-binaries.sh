#!/usr/bin/env bash
# Builds (or reuses from the cache) every Go binary the local cluster and the main job need.
# Binaries are cached outside the repo, one folder per tool and version, so a fresh clone on the
# same machine (and CI) reuses them: a cold build of the k8s control plane takes tens of minutes.
# Usage: hack/build-binaries.sh   -> prints the cache's bin folder on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

mkdir -p "$KT2T_BIN"
log() { echo "[build-binaries $(date +%H:%M:%S)] $*" >&2; }

# install_module NAME VERSION MODULE_PATH... : go install each package@VERSION into the cache.
install_module() {
  local name=$1 version=$2; shift 2
  local dest="$KT2T_CACHE/$name@$version" pkg missing=0
  for pkg in "$@"; do [[ -x "$dest/$(basename "$pkg")" ]] || missing=1; done
  if [[ $missing == 0 ]]; then log "$name@$version cached"; return; fi
  log "building $name@$version ..."
  local t0=$SECONDS
  for pkg in "$@"; do GOBIN="$dest" go install "$pkg@$version"; done
  log "built $name@$version in $((SECONDS - t0))s"
}

build_control_plane() {
  local dest="$KT2T_CACHE/kubernetes@$K8S_VERSION" bin missing=0
  for bin in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    [[ -x "$dest/$bin" ]] || missing=1
  done
  if [[ $missing == 0 ]]; then log "kubernetes@$K8S_VERSION cached"; return; fi
  log "building kubernetes@$K8S_VERSION control plane (cold: tens of minutes on 2 cores) ..."
  local t0=$SECONDS minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
    -X k8s.io/component-base/version.gitTreeState=clean"
  mkdir -p "$dest.partial"
  (cd "$here/k8s" && go build -ldflags "$ldflags" -o "$dest.partial/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler)
  (cd "$here/k8s" && go build -ldflags "-s -w" -o "$dest.partial/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  log "built kubernetes@$K8S_VERSION in $((SECONDS - t0))s"
}

build_kubetest2() {
  local dest="$KT2T_CACHE/kubetest2@$KUBETEST2_VERSION"
  if [[ -x "$dest/kubetest2-tester-exec" ]]; then log "kubetest2@$KUBETEST2_VERSION cached"; return; fi
  log "building kubetest2@$KUBETEST2_VERSION ..."
  local t0=$SECONDS
  # hack/kubetest2/go.sum pins the module's hash: the checksum database has no entry for it.
  (cd "$here/kubetest2" && GONOSUMDB=sigs.k8s.io/kubetest2 go build -o "$dest/" \
      sigs.k8s.io/kubetest2 sigs.k8s.io/kubetest2/kubetest2-noop sigs.k8s.io/kubetest2/kubetest2-tester-exec)
  log "built kubetest2@$KUBETEST2_VERSION in $((SECONDS - t0))s"
}

build_kubetest2
install_module kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
install_module mpi-operator "$MPI_OPERATOR_VERSION" github.com/kubeflow/mpi-operator/cmd/mpi-operator
build_control_plane

# One folder on PATH with links to every versioned binary.
for dir in "$KT2T_CACHE/kubetest2@$KUBETEST2_VERSION" "$KT2T_CACHE/kwok@$KWOK_VERSION" \
           "$KT2T_CACHE/mpi-operator@$MPI_OPERATOR_VERSION" "$KT2T_CACHE/kubernetes@$K8S_VERSION"; do
  for bin in "$dir"/*; do ln -sf "$bin" "$KT2T_BIN/$(basename "$bin")"; done
done
echo "$KT2T_BIN"
