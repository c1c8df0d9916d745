"""What the cluster benches share: figures as `name: value unit` lines, progress on stderr, and a
local cluster of the bench's own (hack/local-cluster under the bench's KT2T_STATE and port offset,
unless the environment names another)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCAL_CLUSTER = REPO / "hack" / "local-cluster"


def emit(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """One figure: `name: value unit`, with an optional note after `#`."""
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    print(f"{name}: {shown} {unit}".rstrip() + (f"  # {note}" if note else ""), flush=True)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class BenchCluster:
    """A local cluster of the bench's own: KT2T_STATE and KT2T_PORT_OFFSET from the environment,
    else the bench's defaults (a port offset no other bench or test cluster uses)."""

    state: Path
    port_offset: str

    @classmethod
    def from_env(cls, default_state: Path, default_port_offset: int) -> BenchCluster:
        return cls(Path(os.environ.get("KT2T_STATE") or default_state),
                   os.environ.get("KT2T_PORT_OFFSET") or str(default_port_offset))

    @property
    def env(self) -> dict[str, str]:
        return {"KT2T_STATE": str(self.state), "KT2T_PORT_OFFSET": self.port_offset}

    def pid_of(self, component: str) -> int:
        """The pid hack/local-cluster recorded for a component (its supervisor's, if supervised)."""
        return int((self.state / "run" / f"{component}.pid").read_text().split()[0])

    def run(self, *args: str, timeout: float = 600) -> str:
        """`hack/local-cluster ARGS` on this cluster; its stdout, or exit naming the command."""
        result = subprocess.run([str(LOCAL_CLUSTER), *args], env={**os.environ, **self.env}, capture_output=True,
                                text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise SystemExit(f"hack/local-cluster {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stderr[-4000:]}")
        return result.stdout

    def is_up(self) -> bool:
        return subprocess.run([str(LOCAL_CLUSTER), "status"], env={**os.environ, **self.env}, capture_output=True,
                              check=False).returncode == 0

    @contextlib.contextmanager
    def up(self, *up_args: str, keep: bool = False) -> Iterator[str]:
        """Up the cluster (`up UP_ARGS`, e.g. --real-nodes 2); yield its kubeconfig; bring it down after
        unless `keep` or it was already up."""
        already_up = self.is_up()
        progress(f"hack/local-cluster up {' '.join(up_args)} (KT2T_STATE={self.state}, "
                 f"KT2T_PORT_OFFSET={self.port_offset})")
        kubeconfig = self.run("up", *up_args, timeout=1800).strip().splitlines()[-1]
        try:
            yield kubeconfig
        finally:
            if keep or already_up:
                progress(f"cluster left running: KUBECONFIG={kubeconfig}")
            else:
                progress("hack/local-cluster down")
                self.run("down")
