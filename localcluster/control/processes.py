"""Background processes the cluster started: start detached, record pid and command line, stop by pid.

A pid alone can be reused by an unrelated process after ours died, so every pid file has a
companion file with the exact command line; a pid counts as ours only while /proc shows that
same command line. Nothing here ever signals a process by name or group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    """Where one component's pid and command line are recorded."""

    run_dir: Path
    name: str

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def cmdline_file(self) -> Path:
        return self.run_dir / f"{self.name}.cmdline.json"

    @property
    def fingerprint_file(self) -> Path:
        return self.run_dir / f"{self.name}.fingerprint"

    def recorded_fingerprint(self) -> str | None:
        try:
            return self.fingerprint_file.read_text().strip()
        except OSError:
            return None

    def recorded_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def recorded_argv(self) -> list[str] | None:
        try:
            return list(json.loads(self.cmdline_file.read_text()))
        except (OSError, ValueError):
            return None

    def running_pid(self) -> int | None:
        """The recorded pid if that process is alive and still runs the recorded command."""
        pid, argv = self.recorded_pid(), self.recorded_argv()
        if pid is None or argv is None:
            return None
        return pid if _runs(pid, argv) else None

    def start(self, argv: list[str], log_file: Path, env: dict[str, str] | None = None,
              cwd: Path | None = None, fingerprint: str = "",
              preexec_fn: Callable[[], None] | None = None) -> int:
        """Starts argv detached from this process (own session, stdin closed), output to log_file;
        `fingerprint` records what code it was started from (see code_fingerprint); `preexec_fn`
        runs in the child before the exec (the real nodes' processes join cgroups and namespaces)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                # preexec_fn is unsafe beside other threads; `hack/local-cluster` starts processes
                # from its only thread (real_nodes' namespace threads are joined before).
                env=env, cwd=cwd, start_new_session=True, preexec_fn=preexec_fn)  # noqa: PLW1509
        self.cmdline_file.write_text(json.dumps(argv))
        self.fingerprint_file.write_text(fingerprint + "\n")
        self.pid_file.write_text(f"{process.pid}\n")
        # Popen can return while the child is still inside exec (its /proc cmdline not yet argv):
        # wait for the exec to show, so that running_pid() is right from now on.
        deadline = time.monotonic() + 5
        while not _runs(process.pid, argv) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if process.poll() is None:
            # Popen would reap the child in its finalizer; forget it so that the child outlives us.
            process.returncode = 0
        return process.pid

    def stop(self, grace_s: float = 10) -> bool:
        """SIGTERM then, after grace_s, SIGKILL the recorded process if it is ours; True if it was."""
        pid, argv = self.recorded_pid(), self.recorded_argv()
        stopped = False
        if pid is not None and argv is not None and _runs(pid, argv):
            _signal(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _runs(pid, argv) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _runs(pid, argv):
                _signal(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5
                while _runs(pid, argv) and time.monotonic() < deadline:
                    time.sleep(0.1)
            stopped = True
        for path in (self.pid_file, self.cmdline_file, self.fingerprint_file):
            path.unlink(missing_ok=True)
        return stopped


def code_fingerprint(argv: list[str], extra_files: list[Path]) -> str:
    """What a component runs: its executable resolved (the binary cache's path names the version),
    the sources of this package when it runs one of our modules, and `extra_files` (kwok's stages).
    `up` restarts a running component whose fingerprint changed, so a checkout that moved on never
    tests against processes started from older code."""
    digest = hashlib.sha256(str(Path(shutil.which(argv[0]) or argv[0]).resolve()).encode())
    package = Path(__file__).resolve().parents[1]  # localcluster/, this module being in its control/
    sources = sorted(package.rglob("*.py")) if any(a.startswith(f"{package.name}.") for a in argv) else []
    for path in [*sources, *extra_files]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _runs(pid: int, argv: list[str]) -> bool:
    """True while pid is a live (not zombie) process whose command line is argv."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A zombie has exited; it lingers only until its parent (maybe an init that never reaps) waits.
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    return cmdline.split(b"\0")[:-1] == [a.encode() for a in argv]


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
