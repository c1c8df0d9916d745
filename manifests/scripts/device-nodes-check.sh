#!/bin/bash
# TestDeviceNodes (upstream's nvidia-persistence-device-nodes suite, pod-device-nodes-check.yaml): the
# /dev/nvidia* nodes a GPU container needs are character devices owned by root. Exit codes are
# upstream's: 30 no /dev, 31 no GPU or a /dev/nvidia<N>, 32 nvidiactl, 33 nvidia-uvm,
# 34 nvidia-uvm-tools, 35 not owned by root.
set -eu
set -o pipefail

echo "=== 7.3 device nodes present, character devices, owned by root ==="
if [ ! -d /dev ]; then
  echo "FAIL 7.3: /dev is not accessible in the container"
  exit 30
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l | tr -d ' ' || true)
if [ "${gpus:-0}" -lt 1 ]; then
  echo "FAIL 7.3: nvidia-smi reports no GPU"
  exit 31
fi
# The runtime injects only the GPUs the pod was given, whose host indexes need not start at 0.
devices=$(ls /dev/nvidia[0-9]* 2>/dev/null || true)
if [ -z "$devices" ]; then
  echo "FAIL 7.3: no /dev/nvidia<N> device node in the container"
  exit 31
fi
echo "nvidia-smi sees $gpus GPU(s); device nodes: $(echo "$devices" | tr '\n' ' ')"

char_device() {
  local path="$1" code="$2"
  if [ ! -c "$path" ]; then
    echo "FAIL 7.3: $path is missing or not a character device"
    exit "$code"
  fi
  owner=$(stat -c %u "$path" 2>/dev/null || echo unknown)
  if [ "$owner" != 0 ]; then
    echo "FAIL 7.3: $path is owned by uid $owner, not root"
    exit 35
  fi
  echo "OK 7.3: $path $(stat -c 'mode=%a owner=%U:%G' "$path")"
}

for device in $devices; do
  char_device "$device" 31
done
char_device /dev/nvidiactl 32
char_device /dev/nvidia-uvm 33
char_device /dev/nvidia-uvm-tools 34

echo "=== all expected /dev/nvidia* device nodes present ==="
