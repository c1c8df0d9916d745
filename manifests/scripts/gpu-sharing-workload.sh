#!/bin/sh
# TestTimeSlicing and TestMps: each pod prints its GPU's UUID and compute mode
# (harness/verdict/gpu_sharing.py reads them), then holds the GPU SHARING_HOLD_SECONDS so that all
# of them run at once (the Job controller starts them in batches).
nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader && sleep "$SHARING_HOLD_SECONDS"
