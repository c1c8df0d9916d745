"""Waiting and telling: the error a failed step raises, the progress lines on stderr, and the poll
that waits for a condition. Here, below both, so that the cluster's lifecycle (localcluster.cluster)
and the real nodes (localcluster.realnodes.manager) share them without importing each other."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime


class ClusterError(Exception):
    """`up`, `down` or a wait failed; the message says which step and why."""


def progress(message: str) -> None:
    print(f"[local-cluster {datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               last_state: Callable[[], str] = lambda: "", interval_s: float = 0.25) -> None:
    """Polls condition until true; ClusterError naming what was awaited (and the last state seen)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            state = last_state()
            raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                               + (f"; last state: {state}" if state else ""))
        time.sleep(interval_s)
