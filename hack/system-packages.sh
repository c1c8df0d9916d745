#!/usr/bin/env bash
# The system commands the set-up and the tests need, installed from Debian's packages when missing
# (idempotent; needs root for apt-get, otherwise names what to install and fails).
# Python (3.10+) and Go (1.25+; an older go fetches the pinned toolchain from the module proxy)
# must already be on the machine: the README says so.
# Usage: hack/system-packages.sh [COMMAND=PACKAGE ...]   (localcluster/base/system_packages.txt's rows, plus any given)
set -euo pipefail
log() { echo "[system-packages $(date +%H:%M:%S)] $*" >&2; }

# command (or file) -> Debian package that provides it: every row of localcluster/base/system_packages.txt.
declare -A PACKAGE_OF=()
while read -r item package _; do
  [[ -z $item || $item == \#* ]] || PACKAGE_OF[$item]=$package
done < "$(dirname "$0")/../localcluster/base/system_packages.txt"
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
