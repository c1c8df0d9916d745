#!/usr/bin/env bash
# Builds (or reuses from the cache) every Go binary the local cluster and the main job need.
# Each tool is built from a module under hack/go/<tool>/ whose go.mod pins the version and whose
# go.sum pins the hashes (`go install pkg@version` fails for modules the proxy lists no versions
# of: it looks up their deprecation in that list). Binaries are cached outside the repo, one folder
# per tool and version, so a fresh clone on the same machine (and CI) reuses them: a cold build of
# the k8s control plane takes tens of minutes on 2 cores.
# Usage: hack/build-binaries.sh [--real-nodes]   -> prints the folder holding links to every binary,
# last line. --real-nodes also builds what real nodes run: kubelet, kube-proxy, CoreDNS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
log() { echo "[build-binaries $(date +%H:%M:%S)] $*" >&2; }
# The checksum database has no entry for some pinned pseudo-versions; go.sum pins them instead.
export GONOSUMDB=sigs.k8s.io/kubetest2,github.com/kubeflow/mpi-operator,github.com/intelligent-machine-learning/dlrover

# module_dir GO_MODULE_FOLDER MODULE: download MODULE (at the version the folder's go.mod pins) into
# the module cache and print its source folder. `go list -m -f '{{.Dir}}'` prints an empty string
# while a module is not yet downloaded, so a cold machine must download first; fail naming the
# module when the download or the folder is missing.
module_dir() {
  local mod_folder=$1 module=$2 json dir
  if ! json=$(cd "$mod_folder" && go mod download -json "$module"); then
    log "cannot download Go module $module (pinned in $mod_folder/go.mod): is the Go module proxy reachable?"
    return 1
  fi
  dir=$(python3 -c 'import json,sys; print(json.load(sys.stdin).get("Dir", ""))' <<<"$json")
  if [[ -z $dir || ! -d $dir ]]; then
    log "Go module $module (pinned in $mod_folder/go.mod): downloaded, but no source folder: $json"
    return 1
  fi
  echo "$dir"
}

# `build-binaries.sh module-dir TOOL MODULE`: MODULE's source folder, at the version hack/go/TOOL pins
# (hack/render-trainer-manifests.sh renders its manifests from there).
if [[ ${1:-} == module-dir ]]; then
  module_dir "$here/go/${2:?usage: build-binaries.sh module-dir TOOL MODULE}" "${3:?usage: build-binaries.sh module-dir TOOL MODULE}"
  exit
fi

# cached_build LABEL DEST "BINARY..." BUILD_COMMAND...: unless every BINARY is in DEST, run
# BUILD_COMMAND with the folder to build into appended, then move that folder into place whole (an
# interrupted build leaves only DEST.partial, never a DEST that looks cached).
cached_build() {
  local label=$1 dest=$2 binaries=$3 bin missing=0; shift 3
  for bin in $binaries; do [[ -x "$dest/$bin" ]] || missing=1; done
  if [[ $missing == 0 ]]; then log "$label cached in $dest"; return; fi
  log "building $label ..."
  local t0=$SECONDS
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  "$@" "$dest.partial"
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  log "built $label in $((SECONDS - t0))s"
}

# go_build_in FOLDER LDFLAGS PACKAGE... OUT: go build the packages of the module in FOLDER into OUT.
go_build_in() {
  local folder=$1 ldflags=$2; shift 2
  local out=${*: -1}
  (cd "$folder" && go build -ldflags "$ldflags" -o "$out/" "${@:1:$#-1}")
}

# build_tool NAME VERSION LDFLAGS PACKAGE... : go build the packages of hack/go/NAME into the cache.
build_tool() {
  local name=$1 version=$2 ldflags=$3 pkg binaries=(); shift 3
  for pkg in "$@"; do binaries+=("$(basename "$pkg")"); done
  cached_build "$name@$version" "$KT2T_CACHE/$name@$version" "${binaries[*]}" \
    go_build_in "$here/go/$name" "$ldflags" "$@"
}

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor
  -X k8s.io/component-base/version.gitTreeState=clean"

# kwok: its log reader asks a stub runtime whether the container still runs and, told
# "unavailable", follows forever (`kubectl logs -f` never ends). hack/go/kwok/follow-ends.patch
# makes the stub answer "exited" once the node agent has put "<log file>.exited" next to the log.
# The patched copy of the module replaces the pinned one (`go mod edit -replace` on a copy of
# hack/go/kwok's go.mod): only kwok's own packages are compiled again. Cache key "-follow-ends".
KWOK_BUILD=$KWOK_VERSION-follow-ends
# prepare_kwok_source DIR: DIR/kwok is the pinned kwok source with the patch applied, DIR/go.mod
# (hack/go/kwok's, with the replace) builds it.
prepare_kwok_source() {
  local dir=$1 src
  src=$(module_dir "$here/go/kwok" sigs.k8s.io/kwok)
  mkdir -p "$dir"
  cp -r "$src" "$dir/kwok" && chmod -R u+w "$dir/kwok"
  patch -s -d "$dir/kwok" -p1 <"$here/go/kwok/follow-ends.patch" \
    || { log "kwok: hack/go/kwok/follow-ends.patch does not apply to $src"; return 1; }
  cp "$here/go/kwok/go.mod" "$here/go/kwok/go.sum" "$dir/"
  (cd "$dir" && go mod edit -replace sigs.k8s.io/kwok=./kwok)
}
# mpi-operator serves its leader-election health check on ":8080", every interface, fixed port.
# Build it from a patched copy of its two main-package files that listens on
# $MPI_OPERATOR_HEALTH_ADDRESS (default 127.0.0.1:8080), so every listener of the local cluster
# stays on loopback. Go refuses overlays of files in the module cache, so the copies become virtual
# files of our own module (package .../loopback) through `go build -overlay`; the rest of
# mpi-operator is compiled unchanged from the pinned module. The cache key says "loopback" so an
# unpatched build is never taken for this one.
MPI_OPERATOR_BUILD=$MPI_OPERATOR_VERSION-loopback
mpi_mod_dir="$here/go/mpi-operator"
# prepare_mpi_operator_overlay DIR: DIR/main.go and DIR/server.go (patched copies of the pinned
# module's cmd/mpi-operator files) and DIR/overlay.json mapping them into ./loopback.
prepare_mpi_operator_overlay() {
  local dir=$1 upstream
  upstream=$(module_dir "$mpi_mod_dir" github.com/kubeflow/mpi-operator)/cmd/mpi-operator
  mkdir -p "$dir"
  local health_line='Addr:    fmt.Sprintf(":%d", healthCheckPort),'
  grep -qF "$health_line" "$upstream/app/server.go" \
    || { log "mpi-operator: no '$health_line' in $upstream/app/server.go"; return 1; }
  sed "s|$health_line|Addr:    loopbackHealthCheckAddress(),|" "$upstream/app/server.go" >"$dir/server.go"
  cat >>"$dir/server.go" <<'GO'

// loopbackHealthCheckAddress is patched in by kubetest2-training's hack/build-binaries.sh.
func loopbackHealthCheckAddress() string {
	if address := os.Getenv("MPI_OPERATOR_HEALTH_ADDRESS"); address != "" {
		return address
	}
	return fmt.Sprintf("127.0.0.1:%d", healthCheckPort)
}
GO
  sed 's|"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app"|"kubetest2-training/hack/go/mpi-operator/loopback/app"|' \
    "$upstream/main.go" >"$dir/main.go"
  printf '{"Replace": {"%s": "%s", "%s": "%s"}}\n' \
    "$mpi_mod_dir/loopback/main.go" "$dir/main.go" "$mpi_mod_dir/loopback/app/server.go" "$dir/server.go" \
    >"$dir/overlay.json"
}

DLROVER_MODULE=github.com/intelligent-machine-learning/dlrover/go/elasticjob
# The CRDs `hack/local-cluster up` installs, copied out of the pinned modules so that `up` needs
# neither `go` nor the module cache (the binaries' cache is all it reads).
CRDS=("kwok sigs.k8s.io/kwok $KWOK_VERSION kustomize/crd/bases/kwok.x-k8s.io_logs.yaml"
      "mpi-operator github.com/kubeflow/mpi-operator $MPI_OPERATOR_VERSION manifests/base/kubeflow.org_mpijobs.yaml"
      "trainer github.com/kubeflow/trainer/v2 $TRAINER_VERSION manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
      "trainer github.com/kubeflow/trainer/v2 $TRAINER_VERSION manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml"
      "trainer github.com/kubeflow/trainer/v2 $TRAINER_VERSION manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"
      "jobset sigs.k8s.io/jobset $JOBSET_VERSION config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
      "dlrover $DLROVER_MODULE $DLROVER_OPERATOR_VERSION config/crd/bases/elastic.iml.github.io_elasticjobs.yaml"
      "dlrover $DLROVER_MODULE $DLROVER_OPERATOR_VERSION config/crd/bases/elastic.iml.github.io_scaleplans.yaml")
# copy_crd TOOL MODULE PATH_IN_MODULE DEST_FILE
copy_crd() {
  local src
  src=$(module_dir "$here/go/$1" "$2")
  [[ -f $src/$3 ]] || { log "$2: no $3 in $src"; return 1; }
  mkdir -p "$(dirname "$4")" && cp "$src/$3" "$4.partial" && chmod 0644 "$4.partial" && mv "$4.partial" "$4"
}

# `build-binaries.sh sources DIR`: only the steps that download, locate and patch module sources,
# into DIR, without compiling (tests/unit/test_build_steps.py runs it with an empty module cache).
if [[ ${1:-} == sources ]]; then
  out=${2:?usage: build-binaries.sh sources DIR}
  prepare_kwok_source "$out/kwok-build"
  prepare_mpi_operator_overlay "$out/mpi-operator-overlay"
  for crd in "${CRDS[@]}"; do
    read -r tool module _ path <<<"$crd"
    copy_crd "$tool" "$module" "$path" "$out/crds/$(basename "$path")"
  done
  echo "$out"
  exit 0
fi

build_tool kubetest2 "$KUBETEST2_VERSION" "-s -w" sigs.k8s.io/kubetest2 \
  sigs.k8s.io/kubetest2/kubetest2-noop sigs.k8s.io/kubetest2/kubetest2-tester-exec

# build_kwok OUT: the patched kwok source (prepare_kwok_source), built into OUT.
build_kwok() {
  local out=$1 work
  work=$(mktemp -d)
  prepare_kwok_source "$work"
  go_build_in "$work" "-s -w" sigs.k8s.io/kwok/cmd/kwok "$out"
  rm -rf "$work"
}
# build_mpi_operator OUT: the pinned mpi-operator with the patched main files, built into OUT.
build_mpi_operator() {
  local out=$1 patched
  patched=$(mktemp -d)
  prepare_mpi_operator_overlay "$patched"
  (cd "$mpi_mod_dir" && go build -overlay="$patched/overlay.json" -ldflags "-s -w" -o "$out/mpi-operator" ./loopback)
  rm -rf "$patched"
}
kwok_dest="$KT2T_CACHE/kwok@$KWOK_BUILD"
cached_build "kwok@$KWOK_BUILD" "$kwok_dest" kwok build_kwok
mpi_dest="$KT2T_CACHE/mpi-operator@$MPI_OPERATOR_BUILD"
cached_build "mpi-operator@$MPI_OPERATOR_BUILD" "$mpi_dest" mpi-operator build_mpi_operator

build_tool kubernetes "$K8S_VERSION" "${k8s_ldflags//$'\n'/ }" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler

# etcd: the server's main package, built in the kubernetes module so it is the version that
# kubernetes pins ($ETCD_VERSION must match hack/go/kubernetes/go.mod).
# build_etcd OUT: named etcd (go build would name the binary of .../server/v3 "server").
build_etcd() {
  (cd "$here/go/kubernetes" && go build -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
}
etcd_dest="$KT2T_CACHE/etcd@$ETCD_VERSION"
cached_build "etcd@$ETCD_VERSION" "$etcd_dest" etcd build_etcd

# The CRDs, cached per tool and version and linked from $KT2T_BIN/crds/.
for crd in "${CRDS[@]}"; do
  read -r tool module version path <<<"$crd"
  dest="$KT2T_CACHE/crds/$tool@$version/$(basename "$path")"
  [[ -f $dest ]] || copy_crd "$tool" "$module" "$path" "$dest"
  mkdir -p "$KT2T_BIN/crds" && ln -sfn "$dest" "$KT2T_BIN/crds/$(basename "$path")"
done

# Kubeflow Trainer's controller manager and the JobSet controller, unpatched: both take their
# listen addresses and webhook certificates from a config file (localcluster/control/components.py).
build_tool trainer "$TRAINER_VERSION" "-s -w" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
# build_jobset OUT: JobSet's main package is its module's root; named as upstream's Deployment is.
build_jobset() {
  (cd "$here/go/jobset" && go build -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
    -o "$1/jobset-controller-manager" sigs.k8s.io/jobset)
}
jobset_dest="$KT2T_CACHE/jobset@$JOBSET_VERSION"
cached_build "jobset@$JOBSET_VERSION" "$jobset_dest" jobset-controller-manager build_jobset
# DLRover's ElasticJob operator, unpatched: its flags set every listen address (components.py). Its
# main package is its module's root, so the binary is named `elasticjob`, as `go build` names it.
build_tool dlrover "$DLROVER_OPERATOR_VERSION" "-s -w" "$DLROVER_MODULE"
# Real nodes (localcluster/realnodes/): kubelet and kube-proxy from the same pinned
# kubernetes module (a cache folder of their own, so the control plane's stays valid), and CoreDNS
# with only the plugins hack/go/coredns/main.go lists.
node_dirs=()
if [[ ${1:-} == --real-nodes ]]; then
  cached_build "kubernetes-node@$K8S_VERSION" "$KT2T_CACHE/kubernetes-node@$K8S_VERSION" "kubelet kube-proxy" \
    go_build_in "$here/go/kubernetes" "${k8s_ldflags//$'\n'/ }" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  cached_build "coredns@$COREDNS_VERSION" "$KT2T_CACHE/coredns@$COREDNS_VERSION" coredns \
    go_build_in "$here/go/coredns" "-s -w" .
  node_dirs=("$KT2T_CACHE/kubernetes-node@$K8S_VERSION" "$KT2T_CACHE/coredns@$COREDNS_VERSION")
fi

# One folder with links to every binary, for PATH.
mkdir -p "$KT2T_BIN"
for dir in "$KT2T_CACHE/kubetest2@$KUBETEST2_VERSION" "$kwok_dest" \
           "$mpi_dest" "$KT2T_CACHE/kubernetes@$K8S_VERSION" \
           "$etcd_dest" "$KT2T_CACHE/trainer@$TRAINER_VERSION" "$jobset_dest" \
           "$KT2T_CACHE/dlrover@$DLROVER_OPERATOR_VERSION" "${node_dirs[@]}"; do
  for bin in "$dir"/*; do ln -sfn "$bin" "$KT2T_BIN/$(basename "$bin")"; done
done
echo "$KT2T_BIN"
