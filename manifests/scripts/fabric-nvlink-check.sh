#!/bin/bash
# TestFabricAndNVLinkInContainer (upstream's nvidia-fabric-manager suite, pod-fabric-nvlink-check.yaml),
# by what the kernel shows of the node: `nvswitch` (NVSwitches bound under /host/proc/driver), else
# `nvlink_direct` (nvidia-smi nvlink -s lists links), else `non_nvlink`. On nvswitch nodes every GPU's
# fabric state is Completed (5.3; skipped on pre-NVL5 fabrics, as the fabric manager's journal says:
# #818), every link is up (5.4) and their count is the GPU model's links x GPUs (5.5); on non_nvlink
# nodes no link is listed (6.8). Exit codes are upstream's: 50, 51, 52, 53.
set -eu
set -o pipefail

switches=/host/proc/driver/nvidia-nvswitch/devices
if [ -d "$switches" ] && [ -n "$(ls -A "$switches" 2>/dev/null)" ]; then
  class=nvswitch
elif nvidia-smi nvlink -s 2>/dev/null | grep -qE 'Link[[:space:]]+[0-9]+'; then
  class=nvlink_direct
else
  class=non_nvlink
fi
echo "node class: $class"

if [ "$class" = nvswitch ]; then
  pre_nvl5=0
  for journal in /host/var/log/journal /host/run/log/journal; do
    if [ -n "$(ls -A "$journal" 2>/dev/null)" ] && command -v journalctl > /dev/null; then
      pre_nvl5=$(journalctl -D "$journal" -u nvidia-fabricmanager -b --no-pager 2>/dev/null \
                   | grep -c "Detected Pre-NVL5 system" || true)
      break
    fi
  done
  if [ "${pre_nvl5:-0}" -gt 0 ]; then
    echo "SKIP 5.3: the fabric manager detected a pre-NVL5 system; the fabric state applies to NVL5 and later"
  else
    states=$(nvidia-smi -q | awk '/^[[:space:]]*Fabric$/,/^$/' \
               | awk -F':' '/State[[:space:]]*:/ {gsub(/^[[:space:]]+|[[:space:]]+$/, "", $2); print $2}')
    if [ -z "$states" ]; then
      echo "FAIL 5.3: nvidia-smi -q has no Fabric section on an NVSwitch node"
      exit 50
    fi
    while IFS= read -r state; do
      if [ "$state" != Completed ]; then
        echo "FAIL 5.3: a GPU's fabric state is '$state', not Completed"
        exit 50
      fi
    done <<< "$states"
    echo "OK 5.3: every GPU's fabric state is Completed"
  fi

  model=$(nvidia-smi --query-gpu=name --format=csv,noheader | awk 'NR == 1')
  gpus=$(nvidia-smi -L | wc -l)
  case "$model" in
    *V100*) per_gpu=6 ;;
    *A100*) per_gpu=12 ;;
    *H100*|*H200*|*B200*) per_gpu=18 ;;
    *) per_gpu=0 ;;
  esac
  links=$(nvidia-smi nvlink -s 2>&1 || true)
  up=0
  down=0
  while IFS= read -r line; do
    case "$line" in
      *Link*)
        # A link that is up shows its speed (`Link 0: 26.562 GB/s`), a down one `<inactive>` or the like.
        speed=$(awk '{print $3}' <<< "$line")
        case "$speed" in
          [0-9]*) up=$((up + 1)) ;;
          *) echo "  link down: $line"; down=$((down + 1)) ;;
        esac ;;
    esac
  done <<< "$links"
  if [ "$down" -gt 0 ]; then
    echo "FAIL 5.4: $down NVLink(s) not active"
    echo "$links"
    exit 51
  fi
  if [ "$per_gpu" -gt 0 ]; then
    if [ "$up" -ne $((per_gpu * gpus)) ]; then
      echo "FAIL 5.5: $up NVLinks active, expected $((per_gpu * gpus)) ($gpus x $model, $per_gpu each)"
      exit 52
    fi
    echo "OK 5.4: all $up NVLinks active"
    echo "OK 5.5: $up NVLinks, $gpus x $model"
  else
    echo "OK 5.4: all $up NVLinks active"
    echo "SKIP 5.5: no NVLink count known for '$model'"
  fi
else
  echo "SKIP 5.3: not an NVSwitch node"
  echo "SKIP 5.4: not an NVSwitch node"
fi

if [ "$class" = non_nvlink ]; then
  listed=$(nvidia-smi nvlink -s 2>/dev/null | grep -E 'Link[[:space:]]+[0-9]+' || true)
  if [ -n "$listed" ]; then
    echo "FAIL 6.8: the node has no NVLink yet the driver lists links: $listed"
    exit 53
  fi
  echo "OK 6.8: no NVLink listed, as expected without NVLink"
else
  echo "SKIP 6.8: the node has NVLink ($class)"
fi

echo "=== all applicable fabric/NVLink checks passed ==="
