#!/bin/bash
# TestSharedLibraries (upstream's nvidia-shared-libraries suite, daemonset-shared-libraries-check.yaml),
# a pod on every GPU node: each SONAME of REQUIRED_LIBS is in the container's ld.so cache and every
# path it resolves to matches ALLOWED_LIB_DIRS_RE (a shadowing copy elsewhere fails: ld.so takes the
# cache's first match). Upstream's DaemonSet pod stays up, un-Ready on a failure (the test waits out
# 10 minutes); this one, a per-node Job's, exits 1 there (the test fails at once) and 0 when every
# library passed.
set -eu
set -o pipefail

echo "=== ldconfig -p (NVIDIA / CUDA entries) ==="
cache=$(ldconfig -p) || { echo "FAIL ldconfig: ldconfig -p exited non-zero"; exit 1; }
if ! grep -E 'libcuda|libnvidia' <<< "$cache"; then
  echo "FAIL ldconfig: no NVIDIA or CUDA library in the ld.so cache"
  exit 1
fi
failed=0
for lib in $REQUIRED_LIBS; do
  paths=$(awk -v lib="$lib" '$1 == lib {print $NF}' <<< "$cache")
  if [ -z "$paths" ]; then
    echo "FAIL $lib: not in the ld.so cache"
    failed=1
    continue
  fi
  while IFS= read -r path; do
    if grep -qE -- "$ALLOWED_LIB_DIRS_RE" <<< "$path"; then
      echo "OK $lib: $path"
    else
      echo "FAIL $lib: resolves to $path, not under $ALLOWED_LIB_DIRS_RE"
      failed=1
    fi
  done <<< "$paths"
done
if [ "$failed" != 0 ]; then
  exit 1
fi
echo "=== all required NVIDIA driver libraries resolve under the allowed folders ==="
