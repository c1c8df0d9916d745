#!/bin/bash
# TestContainerdConfig (upstream's daemonset-containerd-check.yaml, verbatim): the node's containerd
# config must name an ECR (or local) sandbox image, the nvidia-container-runtime and the systemd
# cgroup driver. Run as `sh -c` in amazonlinux, whose sh is bash ([[ ]] and pipefail below).
set -e
set -o pipefail
echo "=== content read by the container ==="
cat /host-etc/containerd/config.toml
version_line=$(grep -E '^version\s*=' /host-etc/containerd/config.toml || true)
if [ -z "$version_line" ]; then
  echo "FAIL: no version line found in containerd config"
  exit 1
fi
version=$(echo "$version_line" | cut -d'=' -f2 | tr -d ' ')
echo "INFO: containerd config version = $version"
if [ "$version" = "2" ]; then
  sandbox_line=$(grep -E 'sandbox_image\s*=' /host-etc/containerd/config.toml || true)
elif [ "$version" = "3" ]; then
  sandbox_line=$(grep -E 'sandbox\s*=' /host-etc/containerd/config.toml || true)
else
  echo "FAIL: unsupported containerd config version: $version"
  exit 1
fi
if [ -z "$sandbox_line" ]; then
  echo "FAIL: no sandbox_image or sandbox line found"
  exit 1
fi
sandbox_image=$(echo "$sandbox_line" | cut -d'"' -f2)
if [[ "$sandbox_image" == "localhost"* ]]; then
  echo "INFO: skipping .ecr. check for localhost sandbox image"
elif [[ "$sandbox_image" != *".ecr."* ]]; then
  echo "FAIL: no .ecr. reference in $sandbox_image"
  exit 1
fi
if ! grep -q "nvidia-container-runtime" /host-etc/containerd/config.toml; then
  echo "FAIL: no nvidia-container-runtime found"
  exit 1
fi
if ! ( grep -q 'systemd_cgroup = true' /host-etc/containerd/config.toml || \
       grep -q 'SystemdCgroup = true' /host-etc/containerd/config.toml ); then
  echo "FAIL: no systemd cgroup setting"
  exit 1
fi
echo "containerd config check PASSED."
tail -f /dev/null
