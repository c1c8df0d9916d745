#!/usr/bin/env bash
# Builds (or reuses from the cache) every Go binary the local cluster and the main job need.
# Each tool is built from a module under hack/go/<tool>/ whose go.mod pins the version and whose
# go.sum pins the hashes (`go install pkg@version` fails for modules the proxy lists no versions
# of: it looks up their deprecation in that list). Binaries are cached outside the repo, one folder
# per tool and version, so a fresh clone on the same machine (and CI) reuses them: a cold build of
# the k8s control plane takes tens of minutes on 2 cores.
# Usage: hack/build-binaries.sh   -> prints the folder holding links to every binary, last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
log() { echo "[build-binaries $(date +%H:%M:%S)] $*" >&2; }
# The checksum database has no entry for some pinned pseudo-versions; go.sum pins them instead.
export GONOSUMDB=sigs.k8s.io/kubetest2,github.com/kubeflow/mpi-operator

# build_tool NAME VERSION LDFLAGS PACKAGE... : go build the packages of hack/go/NAME into the cache.
build_tool() {
  local name=$1 version=$2 ldflags=$3; shift 3
  local dest="$KT2T_CACHE/$name@$version" pkg missing=0
  for pkg in "$@"; do [[ -x "$dest/$(basename "$pkg")" ]] || missing=1; done
  if [[ $missing == 0 ]]; then log "$name@$version cached in $dest"; return; fi
  log "building $name@$version ..."
  local t0=$SECONDS
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  (cd "$here/go/$name" && go build -ldflags "$ldflags" -o "$dest.partial/" "$@")
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  log "built $name@$version in $((SECONDS - t0))s"
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor
  -X k8s.io/component-base/version.gitTreeState=clean"

build_tool kubetest2 "$KUBETEST2_VERSION" "-s -w" sigs.k8s.io/kubetest2 \
  sigs.k8s.io/kubetest2/kubetest2-noop sigs.k8s.io/kubetest2/kubetest2-tester-exec
build_tool kwok "$KWOK_VERSION" "-s -w" sigs.k8s.io/kwok/cmd/kwok
build_tool mpi-operator "$MPI_OPERATOR_VERSION" "-s -w" github.com/kubeflow/mpi-operator/cmd/mpi-operator
build_tool kubernetes "$K8S_VERSION" "${k8s_ldflags//$'\n'/ }" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

# etcd: the server's main package, built in the kubernetes module so it is the version that
# kubernetes pins ($ETCD_VERSION must match hack/go/kubernetes/go.mod).
etcd_dest="$KT2T_CACHE/etcd@$ETCD_VERSION"
if [[ -x "$etcd_dest/etcd" ]]; then
  log "etcd@$ETCD_VERSION cached in $etcd_dest"
else
  log "building etcd@$ETCD_VERSION ..."
  mkdir -p "$etcd_dest.partial"
  (cd "$here/go/kubernetes" && go build -ldflags "-s -w" -o "$etcd_dest.partial/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$etcd_dest" && mv "$etcd_dest.partial" "$etcd_dest"
fi

# One folder with links to every binary, for PATH.
mkdir -p "$KT2T_BIN"
for dir in "$KT2T_CACHE/kubetest2@$KUBETEST2_VERSION" "$KT2T_CACHE/kwok@$KWOK_VERSION" \
           "$KT2T_CACHE/mpi-operator@$MPI_OPERATOR_VERSION" "$KT2T_CACHE/kubernetes@$K8S_VERSION" \
           "$etcd_dest"; do
  for bin in "$dir"/*; do ln -sfn "$bin" "$KT2T_BIN/$(basename "$bin")"; done
done
echo "$KT2T_BIN"
