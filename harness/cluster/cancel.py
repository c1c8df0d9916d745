"""Cancellation of a run: SIGTERM/SIGINT and -test.timeout set it; waits and retries watch it."""

from __future__ import annotations

import threading


class CancelToken(threading.Event):
    """A threading.Event that also says why the run was cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.reason = ""

    def cancel(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
            self.set()
