"""The few Linux calls the real nodes need and Python 3.11 lacks: setns, unshare, mount (libc),
and cgroup folders in every mounted cgroup hierarchy (v1 controllers and the unified one)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MNT_DETACH = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
T = TypeVar("T")


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def setns(path: str | Path, nstype: int) -> None:
    """Moves the calling thread (a network namespace) or process (a mount namespace) into path's namespace."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(source: str, target: str | Path, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), str(target).encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None), f"mount {source} on {target}")


def umount_lazy(target: str | Path) -> None:
    _check(_libc.umount2(str(target).encode(), MNT_DETACH), f"umount {target}")


# Where `ip netns` keeps named network namespaces. iproute2 makes the folder at the first `ip netns
# add` and bind-mounts it onto itself (a shared mount, so namespaces added later show in every
# mount namespace).
NETNS_DIR = Path("/run/netns")


def netns_path(name: str) -> Path:
    """Where `ip netns` keeps a named network namespace."""
    return NETNS_DIR / name


def in_netns(name: str, function: Callable[[], T]) -> T:
    """Runs function in a thread inside the named network namespace (sockets it opens stay there)."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            setns(netns_path(name), CLONE_NEWNET)
            result.append(function())
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run, name=f"netns-{name}")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy: /sys/fs/cgroup/<controller> (v1) and .../unified, or the root (v2)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        mount_point = Path(fields[4])
        if fstype in ("cgroup", "cgroup2") and mount_point.parent == CGROUP_ROOT:
            roots.append(mount_point)
    return sorted(set(roots))


def make_cgroup(relative: str) -> None:
    """Creates the cgroup in every hierarchy; in v1's cpuset each new level gets its parent's CPUs
    and memory nodes (it starts with none, and no process could join it)."""
    for hierarchy in cgroup_hierarchies():
        folder = hierarchy
        for part in Path(relative).parts:
            parent, folder = folder, folder / part
            if folder.is_dir():
                continue
            folder.mkdir()
            for setting in ("cpuset.cpus", "cpuset.mems"):
                if (folder / setting).exists() and not (folder / setting).read_text().strip():
                    (folder / setting).write_text((parent / setting).read_text())


def join_cgroup(relative: str) -> None:
    """Moves the calling process into the cgroup in every hierarchy (it must exist)."""
    for hierarchy in cgroup_hierarchies():
        (hierarchy / relative / "cgroup.procs").write_text(f"{os.getpid()}\n")


def cgroup_pids(relative: str) -> set[int]:
    """Every process in the cgroup or below it, in any hierarchy."""
    pids: set[int] = set()
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def kill_cgroup(relative: str, timeout_s: float = 20) -> int:
    """SIGKILLs every process under the cgroup until none is left (a fork racing the kill is
    caught on the next round); returns how many were killed. Frozen first where the v1 freezer is
    mounted, so nothing forks in between."""
    freezer = CGROUP_ROOT / "freezer" / relative / "freezer.state"
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        pids = cgroup_pids(relative) - {os.getpid()}
        if not pids:
            return len(killed)
        if time.monotonic() > deadline:
            raise OSError(f"processes {sorted(pids)[:10]} in cgroup {relative} survived SIGKILL for {timeout_s:.0f}s")
        with contextlib.suppress(OSError):
            freezer.write_text("FROZEN\n")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        with contextlib.suppress(OSError):
            freezer.write_text("THAWED\n")  # SIGKILL is delivered once thawed
        time.sleep(0.1)


def remove_cgroup(relative: str) -> None:
    """rmdir the cgroup and everything below it, deepest first, in every hierarchy (they must be empty)."""
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / relative
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            folder.rmdir()
        top.rmdir()


def mounts_under(folder: Path) -> list[Path]:
    """Mount points at or below folder in this mount namespace, deepest first."""
    prefix = str(folder.absolute())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Octal escapes (\040 for a space) as the kernel writes them.
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: -len(p.parts))


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
