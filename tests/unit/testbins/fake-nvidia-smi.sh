#!/bin/bash
# A stand-in nvidia-smi for the GPU node check scripts (test_gpu_node_suites.py): what it prints is
# set by SMI_BROKEN, SMI_DRIVER, SMI_CC and SMI_GSP.
case "$*" in
  -L) [ -n "$SMI_BROKEN" ] && { echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18; }
      echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)" ;;
  *driver_version*) echo "$SMI_DRIVER"; echo "$SMI_DRIVER" ;;
  *name*) echo "NVIDIA H100 80GB HBM3"; echo "NVIDIA H100 80GB HBM3" ;;
  *compute_cap*) echo "${SMI_CC:-9.0}" ;;
  *index*) echo 0; echo 1 ;;
  -q) echo "    GSP Firmware Version            : ${SMI_GSP:-$SMI_DRIVER}"
      echo "    GSP Firmware Version            : $SMI_DRIVER" ;;
  *) exit 0 ;;
esac
