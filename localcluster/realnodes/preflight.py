"""What `up --real-nodes N` needs before it makes anything: root, the commands, the kernel's features.

Checked first, all at once, so a missing piece is named (with the Debian package that provides it)
and nothing is half made."""

from __future__ import annotations

import os
from pathlib import Path

from localcluster.base import system_packages


def problems(node_binaries: list[Path]) -> list[str]:
    """Everything missing, each with what provides it; empty when real nodes can start."""
    found = []
    if os.geteuid() != 0:
        found.append("real nodes need root (network namespaces, mounts, cgroups, containerd): run as root")
    packages = system_packages.missing_packages("real-nodes")
    if packages:
        found.append(f"missing Debian packages: {' '.join(packages)} (hack/system-packages.sh installs them)")
    for binary in node_binaries:
        if not os.access(binary, os.X_OK):
            found.append(f"{binary} is missing: hack/build-binaries.sh --real-nodes builds it")
    if not Path("/proc/self/ns/net").exists():
        found.append("this kernel has no network namespaces")
    if "overlay" not in Path("/proc/filesystems").read_text():
        found.append("this kernel has no overlay file system (containerd's snapshotter)")
    return found
