"""What `up --real-nodes N` needs before it makes anything: root, the commands, the kernel's features.

Checked first, all at once, so a missing piece is named (with the Debian package that provides it)
and nothing is half made."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# command -> Debian package (hack/system-packages.sh installs the same table).
COMMANDS = {
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "ip": "iproute2",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "conntrack": "conntrack",
    "gcc": "gcc",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
CNI_DIR = Path("/usr/lib/cni")
FILES = {Path("/bin/busybox"): "busybox-static", Path("/usr/lib/x86_64-linux-gnu/libc.a"): "libc6-dev"}


def problems(node_binaries: list[Path]) -> list[str]:
    """Everything missing, each with what provides it; empty when real nodes can start."""
    found = []
    if os.geteuid() != 0:
        found.append("real nodes need root (network namespaces, mounts, cgroups, containerd): run as root")
    packages = sorted({package for command, package in COMMANDS.items() if shutil.which(command) is None})
    packages += sorted({"containernetworking-plugins" for p in CNI_PLUGINS if not (CNI_DIR / p).exists()})
    packages += sorted({package for path, package in FILES.items() if not path.exists()})
    if packages:
        found.append(f"missing Debian packages: {' '.join(sorted(set(packages)))} "
                     "(hack/system-packages.sh installs them)")
    for binary in node_binaries:
        if not os.access(binary, os.X_OK):
            found.append(f"{binary} is missing: hack/build-binaries.sh --real-nodes builds it")
    if not Path("/proc/self/ns/net").exists():
        found.append("this kernel has no network namespaces")
    if "overlay" not in Path("/proc/filesystems").read_text():
        found.append("this kernel has no overlay file system (containerd's snapshotter)")
    return found
