#!/usr/bin/env bash
# How long CI's `.ci/run` takes on a fresh clone of this checkout's HEAD: the budget issue 31 sets
# (at most 35 min with warm caches, 70 from empty ones, on the 2-core machine; CI gives 90).
#   bench/ci_budget.sh [--cold] [--full] [--record] [OUT]
# --cold: empty caches, as on a new machine: a new venv (the clone's own), empty GOMODCACHE, GOCACHE
# and KT2T_CACHE (Go binaries, images, CRDs) and an empty buildah store (CONTAINERS_STORAGE_CONF),
# all under OUT; pip's own cache is kept (torch's download is the registry's, not ours to time).
# --full: hack/test --full instead of .ci/run. OUT (default: a new folder under /var/tmp) holds the
# clone, the log and, with --cold, the caches; it is left for reading (remove it after: GBs with --cold).
# --record: also append the figure, dated, with the machine's cores and load, to bench/RESULTS.md
# (the README carries no timings; that file does).
# Prints each phase's start (hack/test's `==` lines) and the total, `name: value unit  # how`.
# Needs the disk: warm about 20 GB free (the real nodes unpack the workloads image twice), cold 50 GB.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cold=0 full=0 record=0 out=""
for arg in "$@"; do
  case $arg in
    --cold) cold=1 ;;
    --full) full=1 ;;
    --record) record=1 ;;
    -*) echo "usage: bench/ci_budget.sh [--cold] [--full] [--record] [OUT]" >&2; exit 2 ;;
    *) out=$arg ;;
  esac
done
out=${out:-$(mktemp -d /var/tmp/kt2t-ci-budget.XXXXXX)}
mkdir -p "$out"
git clone -q "$repo" "$out/clone"
# The commit measured is the clone's: the checkout may move on while the run takes an hour.
commit=$(git -C "$out/clone" rev-parse --short HEAD)
env_args=()
if [[ $cold == 1 ]]; then
  mkdir -p "$out/cache/gomod" "$out/cache/gobuild" "$out/cache/kt2t" "$out/cache/containers"
  printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n' \
    "$out/cache/containers/graph" "$out/cache/containers/run" >"$out/cache/storage.conf"
  env_args=(GOMODCACHE="$out/cache/gomod" GOCACHE="$out/cache/gobuild" GOFLAGS=-modcacherw
            KT2T_CACHE="$out/cache/kt2t" CONTAINERS_STORAGE_CONF="$out/cache/storage.conf"
            XDG_STATE_HOME="$out/state")
fi
command=(bash .ci/run)
[[ $full == 1 ]] && command=(hack/test --full)
started=$(date +%s)
status=0
(cd "$out/clone" && env "${env_args[@]}" CI=true "${command[@]}" </dev/null) >"$out/log" 2>&1 || status=$?
seconds=$(( $(date +%s) - started ))
grep -E '^== |passed|failed' "$out/log" | grep -Ev '^(PASSED|FAILED) ' | tail -n 20 || true
name=ci_budget_warm
[[ $cold == 1 ]] && name=ci_budget_cold
[[ $full == 1 ]] && name=${name}_full
echo "$name: $((seconds / 60)) min $((seconds % 60)) s  # exit $status, $commit, log $out/log"
if [[ $record == 1 ]]; then
  results=$repo/bench/RESULTS.md
  heading="## CI budget (bench/ci_budget.sh --record)"
  if ! grep -qxF "$heading" "$results"; then
    printf '\n%s\n\n| date (UTC) | machine | figure | time | exit | commit |\n|---|---|---|---|---|---|\n' \
      "$heading" >>"$results"
  fi
  printf '| %s | %s cores, load %s | %s | %d min %d s | %d | %s |\n' "$(date -u +%F)" "$(nproc)" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$name" $((seconds / 60)) $((seconds % 60)) "$status" "$commit" >>"$results"
fi
exit "$status"
