#!/bin/bash
# TestFabricManagerVersionMatchesDriver (upstream's nvidia-fabric-manager suite,
# job-fabric-manager-version-check.yaml), on every GPU node: where NVSwitches are bound
# (/host/proc/driver/nvidia-nvswitch/devices populated), the fabric manager's version in its log
# (/host/var/log/fabricmanager.log) must be the kernel driver's (/host/proc/driver/nvidia/version).
# As upstream's: no NVSwitch, no log, or no version in the log is a skip; exit 1 on a mismatch.
set -eu
set -o pipefail

done_line="=== all fabric-manager version checks passed ==="
switches=/host/proc/driver/nvidia-nvswitch/devices
if [ ! -d "$switches" ] || [ -z "$(ls -A "$switches" 2>/dev/null)" ]; then
  echo "SKIP 5.2: no NVSwitch bound on this node"
  echo "$done_line"
  exit 0
fi
echo "NVSwitch devices: $(find "$switches" -mindepth 1 -maxdepth 1 | wc -l)"
driver=""
if [ -r /host/proc/driver/nvidia/version ]; then
  driver=$(grep -oE '[0-9]+\.[0-9]+\.[0-9]+' /host/proc/driver/nvidia/version | head -n1 || true)
fi
if [ -z "$driver" ]; then
  echo "FAIL 5.2: no driver version in /host/proc/driver/nvidia/version"
  exit 1
fi
log=""
for candidate in /host/var/log/fabricmanager.log /host/var/log/fabric-manager.log; do
  if [ -r "$candidate" ]; then
    log=$candidate
    break
  fi
done
if [ -z "$log" ]; then
  echo "SKIP 5.2: no fabric-manager log under /host/var/log"
  echo "$done_line"
  exit 0
fi
fm=$(grep -Eom1 '[Ff]abric [Mm]anager (SDK )?[Vv]ersion[[:space:]:]+[0-9]+\.[0-9]+\.[0-9]+' "$log" \
       | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
if [ -z "$fm" ]; then
  echo "SKIP 5.2: no fabric-manager version in $log"
  echo "$done_line"
  exit 0
fi
if [ "$fm" != "$driver" ]; then
  echo "FAIL 5.2: fabric manager $fm is not the driver's $driver"
  exit 1
fi
echo "OK 5.2: fabric manager $fm matches the driver"
echo "$done_line"
