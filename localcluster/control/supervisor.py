"""Keeps one command running: restarts it when it exits, stops it when told to stop.

mpi-operator always runs leader election and exits when it cannot renew its lease, e.g. while
the API server restarts (a test of outages does that). In a cluster the kubelet restarts it; here
this supervisor does. Usage: python -m localcluster.control.supervisor -- COMMAND [ARGS...]
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from types import FrameType

MAX_BACKOFF_S = 10.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """In the child, before exec: the kernel kills it when the supervisor dies, even by SIGKILL. A
    controller that keeps running without its API server (Trainer's and JobSet's, leader election
    off) would otherwise outlive a crashed supervisor and be missed by `down`."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m localcluster.control.supervisor -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff_s = 1.0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(args, preexec_fn=die_with_parent)  # noqa: PLW1509 - no threads here
        if stopping:  # the signal came between the loop's check and Popen
            child.terminate()
        code = child.wait()
        if stopping:
            break
        # A run that lasted a while was healthy: start the back-off over.
        backoff_s = 1.0 if time.monotonic() - started > 60 else min(backoff_s * 2, MAX_BACKOFF_S)
        print(f"{datetime.now(timezone.utc):%H:%M:%S} supervisor: {args[0]} exited with {code}; "
              f"restarting in {backoff_s:.0f}s", file=sys.stderr, flush=True)
        deadline = time.monotonic() + backoff_s
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.1)
    if child is not None and child.poll() is None:
        try:
            child.wait(timeout=8)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
