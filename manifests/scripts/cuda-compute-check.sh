#!/bin/bash
# TestCUDACompute (upstream's nvidia-cuda-compute suite, pod-cuda-compute-check.yaml): the CUDA samples
# of the test image in DEMO_SUITE_DIR each exit 0. immaTensorCoreGemm needs compute capability 7.5,
# globalToShmemAsyncCopy 8.0 (skipped below); UnifiedMemoryPerf is skipped on vGPU, which cannot
# migrate pages. Exit codes are upstream's: 20 a sample missing from the image, 21 a sample failed.
set -eu
set -o pipefail

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | awk 'NR == 1 {gsub(/[ .]/, ""); print substr($0, 1, 3)}' || true)
cc=${cc:-0}
echo "compute capability (as an integer): $cc"
vgpu=false
if nvidia-smi -q 2>/dev/null | grep -qE '^[[:space:]]*Virtualization Mode[[:space:]]*:[[:space:]]*VGPU$'; then
  vgpu=true
fi

sample() {
  local name="$1" min_cc="${2:-0}"
  if [ "$cc" -lt "$min_cc" ]; then
    echo "SKIP $name: needs compute capability >= $min_cc, this GPU has $cc"
    return 0
  fi
  if [ ! -x "$DEMO_SUITE_DIR/$name" ]; then
    echo "FAIL $name: $DEMO_SUITE_DIR/$name is not in the image (built without upstream's CUDA samples list)"
    exit 20
  fi
  echo "=== running $name ==="
  if ! "$DEMO_SUITE_DIR/$name"; then
    echo "FAIL $name: the sample's self-check failed (non-zero exit)"
    exit 21
  fi
  echo "OK $name: exited 0"
}

if [ "$vgpu" = true ]; then
  echo "SKIP UnifiedMemoryPerf: unified memory page migration is not supported on vGPU"
else
  sample UnifiedMemoryPerf
fi
sample immaTensorCoreGemm 75
sample reductionMultiBlockCG
sample shfl_scan
sample simpleAWBarrier
sample simpleAtomicIntrinsics
sample simpleVoteIntrinsics
sample warpAggregatedAtomicsCG
sample globalToShmemAsyncCopy 80

echo "=== all CUDA-compute samples passed ==="
