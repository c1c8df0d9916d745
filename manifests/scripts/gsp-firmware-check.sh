#!/bin/bash
# TestGSPFirmware (upstream's nvidia-gsp-firmware suite, pod-gsp-firmware-check.yaml): on Ampere and
# later (compute capability >= 8.0), unless the driver runs with GSP disabled (EnableGpuFirmware: 0
# in /host/proc/driver/nvidia/params, the AMI's choice on g4dn/g5/g5g: #821), every GPU reports a GSP
# firmware version (1.9a) equal to the driver's (1.9b), one version across the GPUs (1.9c).
# Exit codes are upstream's: 41 none or N/A, 42 not the driver's, 43 differing between GPUs.
set -eu
set -o pipefail

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | awk 'NR == 1 {gsub(/[ .]/, ""); print substr($0, 1, 3)}' || true)
cc=${cc:-0}
if [ "$cc" -lt 80 ]; then
  echo "SKIP 1.9: pre-Ampere GPU (compute capability $cc): no GSP firmware"
  echo "=== all GSP firmware checks passed ==="
  exit 0
fi
params=/host/proc/driver/nvidia/params
if [ -r "$params" ]; then
  enabled=$(awk -F': *' '/^EnableGpuFirmware:/ {print $2; exit}' "$params")
  if [ "${enabled:-}" = 0 ]; then
    echo "SKIP 1.9: GSP disabled in the driver (EnableGpuFirmware=0)"
    echo "=== all GSP firmware checks passed ==="
    exit 0
  fi
else
  echo "WARN 1.9: $params unreadable; judging GSP as enabled"
fi

versions=$(nvidia-smi -q | awk -F':' '/GSP Firmware Version/ {gsub(/^[[:space:]]+|[[:space:]]+$/, "", $2); print $2}')
if [ -z "$versions" ]; then
  echo "FAIL 1.9a: nvidia-smi -q has no GSP Firmware Version line on an Ampere or later GPU"
  exit 41
fi
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | awk 'NR == 1 {gsub(/[ \r]/, ""); print}')
if [ -z "$driver" ]; then
  echo "FAIL 1.9a: nvidia-smi reported no driver version"
  exit 41
fi
echo "driver version: $driver"
while IFS= read -r version; do
  if [ -z "$version" ] || [ "$version" = "N/A" ]; then
    echo "FAIL 1.9a: a GPU reports GSP firmware version '${version:-<empty>}' (legacy, non-GSP mode?)"
    exit 41
  fi
  if [ "$version" != "$driver" ]; then
    echo "FAIL 1.9b: GSP firmware $version is not the driver's $driver (a partial re-point?)"
    exit 42
  fi
done <<< "$versions"
distinct=$(sort -u <<< "$versions" | wc -l | tr -d ' ')
if [ "$distinct" -ne 1 ]; then
  echo "FAIL 1.9c: $distinct different GSP firmware versions across the GPUs: $(sort -u <<< "$versions" | tr '\n' ' ')"
  exit 43
fi
echo "OK 1.9: every GPU runs GSP firmware $driver, the driver's"
echo "=== all GSP firmware checks passed ==="
