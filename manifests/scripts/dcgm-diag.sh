#!/bin/bash
# TestDcgmDiagnostics: nv-hostengine (daemonized), then dcgmi against it with the per-SKU config.
# dcgmi's exit status is printed rather than returned, so that a failing diagnostic's report is
# read and judged per GPU (harness/verdict/dcgm.py) instead of ending as "the pod failed".
# Environment (testbins/nvidia/dcgm.py sets it): DCGM_DIAG_LEVEL (dcgmi diag -r), DCGM_DIAG_CONFIG
# (manifests/scripts/dcgm-diag.yaml's text), DCGM_EXIT_PREFIX (what precedes the exit status).
set -u
# Where upstream's nvidia image has its config (its dcgm-diag.sh passes it): used when the image has
# it, as its version follows that image's DCGM; else this project's copy, written to a file.
config=/app/gpu_unit_tests/tests/dcgm-diag.yaml
if [ ! -f "$config" ]; then
  config="${TMPDIR:-/tmp}/dcgm-diag.yaml"
  printf '%s' "$DCGM_DIAG_CONFIG" > "$config"
fi
echo "DCGM per-SKU config: $config"
nv-hostengine
dcgmi diag -r "$DCGM_DIAG_LEVEL" -j -c "$config"
echo "${DCGM_EXIT_PREFIX}$?"
nv-hostengine --term >/dev/null 2>&1 || true
