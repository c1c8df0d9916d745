"""Waiting in tests: poll a condition until it holds, with a deadline that is a hang's, not a speed target.

A test that waits for what it needs (a process listening, a process gone, a stopped state seen)
holds on a host whose speed varies; a fixed sleep or a short deadline that guesses how long a step
takes does not (bench/host_cpu_noise.py: the slowest 5 s window at about half the fastest).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Polls until condition() returns something truthy, which it returns; fails naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
