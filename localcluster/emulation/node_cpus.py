"""Each host-process node's own CPUs: a node labelled `kubetest2-training.local/cpus=<cores>` runs the
processes of its pods in a cgroup of its own whose CFS quota is <cores> of the machine's CPUs.

Why: host-process nodes share the machine's cores, so on a small machine one node's pods run
faster while another node's wait (in a collective, starting up) and slower while they compete. A
real node has its own CPUs: what runs on the node next door does not change its speed. Speed
judgements that compare nodes with each other or with an earlier run (TestNodePairs, a cluster's
own baseline) need that; give every node a share (the sum below the machine's cores, with room
for the control plane) and each node runs at its share whatever the others do.

How: one cgroup per limited node, `kt2t-<cluster id>-nodes/<node>` in the cpu hierarchy (cgroup
v1's cpu controller or v2's cpu.max), quota = cores x PERIOD_US per PERIOD_US. A period of 10 ms
rather than the kernel's 100 ms: a step or a timed window of tens of milliseconds then sees the
quota as a slower CPU, not as "full speed, then throttled for the rest of 100 ms". A thread
moves every process of the node's running containers (their sessions and descendants) into the
cgroup every SWEEP_S; a process forked inside the cgroup is born in it, so the sweep only catches
a container's first process (and anything that left its session). The label gone, the quota is
lifted at once and the cgroup removed once empty. Every limited pod says so (slow_nodes.py records
it): annotation `kubetest2-training.local/cpus-limited-to: <cores>` and a `CpusLimited` event.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from localcluster.base import linux
from localcluster.base.layout import cluster_id
from localcluster.emulation.nodes import CPUS_LABEL
from localcluster.hostnodes.sessions import members_of_sessions

PERIOD_US = 10_000
SWEEP_S = 0.25


def parse_cores(text: str) -> float:
    """The value of the cpus label: cores, a number above 0 (0.5 is half a core, 2 two cores)."""
    try:
        cores = float(text)
    except ValueError:
        cores = float("nan")
    if not cores * PERIOD_US >= 1000:  # the kernel refuses a quota under 1 ms; also false for NaN
        raise ValueError(f"{CPUS_LABEL}: {text!r} is not a number of cores of at least "
                         f"{1000 / PERIOD_US:g} (e.g. 0.4 for 40% of one core, 2 for two cores)")
    return cores


def quota_us(cores: float) -> int:
    """The CFS quota per PERIOD_US that gives `cores`: what the cgroup holds once a limit is applied."""
    return round(cores * PERIOD_US)


class CgroupUnavailable(OSError):
    """This machine (or this user) cannot give a node its own CPUs; the message says why."""


@dataclass(frozen=True)
class CpuHierarchy:
    """Where the cpu controller is mounted, and how its quota is written (v1 or v2)."""

    root: Path
    v2: bool

    @classmethod
    def find(cls, hierarchies: Callable[[], list[Path]] = linux.cgroup_hierarchies) -> CpuHierarchy:
        """The machine's cpu hierarchy; CgroupUnavailable naming what is missing."""
        if os.geteuid() != 0:
            raise CgroupUnavailable(f"{CPUS_LABEL} needs root (to write cgroups); running as uid {os.geteuid()}")
        found = hierarchies()
        for root in found:
            if (root / "cgroup.controllers").exists():
                if "cpu" not in (root / "cgroup.controllers").read_text().split():
                    raise CgroupUnavailable(f"the cgroup v2 hierarchy {root} has no cpu controller")
                return cls(root, v2=True)
            if (root / "cpu.cfs_quota_us").exists():
                return cls(root, v2=False)
        looked = ", ".join(map(str, found)) or "none"
        raise CgroupUnavailable(f"no cgroup cpu controller is mounted (looked in {looked})")

    def make(self, relative: str) -> Path:
        """Creates the cgroup (and its parents); in v2 the parents hand the cpu controller down."""
        folder = self.root
        for part in Path(relative).parts:
            if self.v2:
                _write(folder / "cgroup.subtree_control", "+cpu")
            folder = folder / part
            folder.mkdir(exist_ok=True)
        return folder

    def set_quota(self, folder: Path, cores: float | None) -> None:
        """cores x the period per period; None lifts the quota."""
        quota = quota_us(cores) if cores is not None else None
        if self.v2:
            _write(folder / "cpu.max", f"{quota if quota is not None else 'max'} {PERIOD_US}")
        else:
            # v1 refuses a period under the quota it holds: lift the quota first, then set both.
            _write(folder / "cpu.cfs_quota_us", "-1")
            _write(folder / "cpu.cfs_period_us", str(PERIOD_US))
            if quota is not None:
                _write(folder / "cpu.cfs_quota_us", str(quota))

    def quota_cores(self, folder: Path) -> float | None:
        """The cores the cgroup is limited to; None when it is not (or does not exist)."""
        try:
            if self.v2:
                quota, period = (folder / "cpu.max").read_text().split()
            else:
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
        except (OSError, ValueError):
            return None
        return None if quota in ("max", "-1") else int(quota) / int(period)

    @staticmethod
    def join(folder: Path, pid: int) -> bool:
        """Moves the process into the cgroup; False when it is gone."""
        try:
            _write(folder / "cgroup.procs", str(pid))
        except ProcessLookupError:
            return False
        except OSError as error:
            if error.errno in (errno.ESRCH, errno.ENOENT):
                return False
            raise
        return True

    @staticmethod
    def pids(folder: Path) -> set[int]:
        with contextlib.suppress(OSError):
            return {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return set()

    @staticmethod
    def remove(folder: Path) -> bool:
        """rmdir the cgroup; False while a process is still in it."""
        try:
            folder.rmdir()
        except FileNotFoundError:
            return True
        except OSError as error:
            if error.errno in (errno.EBUSY, errno.ENOTEMPTY):  # a process (or a cgroup) still in it
                return False
            raise
        return True


def _write(path: Path, value: str) -> None:
    with open(path, "w") as out:
        out.write(value + "\n")


def cgroup_parent(state_dir: Path) -> str:
    """The cgroup (in the cpu hierarchy) under which a cluster's nodes get theirs."""
    return f"kt2t-{cluster_id(state_dir)}-nodes"


def remove_leftovers(state_dir: Path) -> None:
    """`down`, after the node agent stopped: its nodes' cgroups, where it could not remove them."""
    with contextlib.suppress(CgroupUnavailable, OSError):
        top = CpuHierarchy.find().root / cgroup_parent(state_dir)
        if top.is_dir():
            for folder in [*top.iterdir(), top]:
                if folder.is_dir():
                    CpuHierarchy.remove(folder)


class NodeCpus:
    """The node agent's side (module docstring). `sessions_on(node)` names the container sessions
    running on a node; `on_change(node, cores)` records a node's new limit on its pods."""

    def __init__(self, parent: str, sessions_on: Callable[[str], list[int]],
                 on_change: Callable[[str, float | None], None], log: Callable[[str], None],
                 hierarchy: Callable[[], CpuHierarchy] = CpuHierarchy.find,
                 members: Callable[[Collection[int]], dict[int, int]] = members_of_sessions) -> None:
        self.parent = parent
        self.sessions_on, self.on_change, self.log, self.members = sessions_on, on_change, log, members
        self.find_hierarchy = hierarchy
        self._hierarchy: CpuHierarchy | None = None
        self.limits: dict[str, float] = {}
        self.folders: dict[str, Path] = {}  # node -> its cgroup, limited or waiting to be removed
        self.lock = threading.Lock()
        self.quit = threading.Event()
        self.thread: threading.Thread | None = None

    def hierarchy(self) -> CpuHierarchy:
        if self._hierarchy is None:
            self._hierarchy = self.find_hierarchy()
        return self._hierarchy

    def limit(self, node: str) -> float | None:
        with self.lock:
            return self.limits.get(node)

    def set_limit(self, node: str, cores: float | None) -> None:
        """Gives the node `cores` (None: the machine's, as before); CgroupUnavailable when it cannot."""
        with self.lock:
            if self.limits.get(node) == cores:
                return
            if cores is None:
                self.limits.pop(node, None)
                if node in self.folders:
                    self.hierarchy().set_quota(self.folders[node], None)
            else:
                folder = self.folders.get(node) or self.hierarchy().make(f"{self.parent}/{node}")
                self.folders[node] = folder
                self.hierarchy().set_quota(folder, cores)
                self.limits[node] = cores
        self.sweep()
        self.on_change(node, cores)

    def sweep(self) -> None:
        """Every process of a limited node's containers into its cgroup; unlimited, empty ones removed."""
        with self.lock:
            limited = {node: self.folders[node] for node in self.limits}
            lifted = [node for node in self.folders if node not in self.limits]
        # One /proc scan for every limited node's containers (as DutyCycler does), none without any.
        folder_of_session = {session: folder for node, folder in limited.items() for session in self.sessions_on(node)}
        if folder_of_session:
            inside = {folder: CpuHierarchy.pids(folder) for folder in set(folder_of_session.values())}
            for pid, session in self.members(folder_of_session.keys()).items():
                folder = folder_of_session[session]
                if pid not in inside[folder]:
                    CpuHierarchy.join(folder, pid)
        for node in lifted:
            with self.lock:  # the agent's sweep thread and set_limit may both sweep: one removes it
                folder = self.folders.get(node)
                if folder is not None and node not in self.limits and CpuHierarchy.remove(folder):
                    del self.folders[node]

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True, name="node-cpus")
        self.thread.start()

    def run(self) -> None:
        while not self.quit.wait(SWEEP_S):
            try:
                self.sweep()
            except OSError as error:  # the next sweep tries again
                self.log(f"node cpus: {error}")

    def stop(self) -> None:
        """Ends the sweeps and removes this agent's cgroups (their processes were stopped first:
        a cgroup still holding one stays, and `hack/local-cluster down` removes it)."""
        self.quit.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        with self.lock:
            self.limits.clear()
        for _ in range(20):  # a killed process leaves its cgroup a moment after it is gone
            with contextlib.suppress(OSError):
                self.sweep()
            if not self.folders:
                break
            time.sleep(0.1)
        if self._hierarchy is not None:
            with contextlib.suppress(OSError):
                CpuHierarchy.remove(self._hierarchy.root / self.parent)
