"""Removing what real nodes leave: processes (containers included), mounts, network namespaces, cgroups.

Found by the cluster's identity, not by what was recorded: after a crash (every process killed)
the records may be stale, and the kernel objects still carry the cluster's names (layout.py).
Order: kill every process in the cgroup (the namespaces and mounts they hold go with them: the
node's mounts live in the holder's mount namespace), unmount anything left under the folder in the
machine's mount namespace, delete the network namespaces, remove the cgroups.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from localcluster.base import linux
from localcluster.realnodes import network


def remove_everything_under(cgroup: str, namespaces: list[str], mount_root: Path) -> list[str]:
    """Returns what was removed, for the caller's progress line."""
    removed = []
    killed = linux.kill_cgroup(cgroup)
    if killed:
        removed.append(f"{killed} processes")
    mounts = linux.mounts_under(mount_root)
    for point in mounts:
        with contextlib.suppress(OSError):
            linux.umount_lazy(point)
    if mounts:
        removed.append(f"{len(mounts)} mounts")
    for name in namespaces:
        network.delete_namespace(name)
    if namespaces:
        removed.append(f"network namespaces {', '.join(namespaces)}")
    # A killed process leaves its cgroup a moment after it is gone from cgroup.procs.
    deadline = time.monotonic() + 10
    while True:
        try:
            linux.remove_cgroup(cgroup)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return removed
