#!/bin/bash
# TestDriverLiveness (upstream's nvidia-driver-liveness suite, pod-driver-liveness-check.yaml): NVML
# answers (`nvidia-smi -L`, 1.1), every GPU reports the expected driver branch (1.5, when
# EXPECTED_DRIVER_VERSION is set) and a model containing EXPECTED_GPU_NAME (1.8, when set). Exit
# codes are upstream's: 10 nvidia-smi, 11 driver branch, 12 GPU model.
set -eu
set -o pipefail

echo "=== 1.1 nvidia-smi -L ==="
if ! nvidia-smi -L; then
  echo "FAIL 1.1: nvidia-smi -L exited non-zero: NVML did not initialise (a driver/library version mismatch?)"
  exit 10
fi
echo "OK 1.1: nvidia-smi -L answered"

echo "=== 1.5 driver branch = expected ==="
if [ -z "${EXPECTED_DRIVER_VERSION:-}" ]; then
  echo "SKIP 1.5: EXPECTED_DRIVER_VERSION not set"
else
  want="${EXPECTED_DRIVER_VERSION%%.*}"
  if ! versions=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader) || [ -z "$versions" ]; then
    echo "FAIL 1.5: nvidia-smi reported no driver version"
    exit 11
  fi
  while read -r version; do
    if [ "${version%%.*}" != "$want" ]; then
      echo "FAIL 1.5: a GPU reports driver $version, branch ${version%%.*}, expected branch $want"
      exit 11
    fi
  done <<< "$versions"
  echo "OK 1.5: every GPU reports driver branch $want"
fi

echo "=== 1.8 GPU model matches the instance type ==="
if [ -z "${EXPECTED_GPU_NAME:-}" ]; then
  echo "SKIP 1.8: EXPECTED_GPU_NAME not set (no GPU model known for the instance type)"
else
  if ! names=$(nvidia-smi --query-gpu=name --format=csv,noheader) || [ -z "$names" ]; then
    echo "FAIL 1.8: nvidia-smi reported no GPU name"
    exit 12
  fi
  while read -r name; do
    if ! grep -qiF -- "$EXPECTED_GPU_NAME" <<< "$name"; then
      echo "FAIL 1.8: GPU model '$name' does not contain '$EXPECTED_GPU_NAME'"
      exit 12
    fi
  done <<< "$names"
  echo "OK 1.8: every GPU model contains '$EXPECTED_GPU_NAME'"
fi

echo "=== all driver-liveness checks passed ==="
