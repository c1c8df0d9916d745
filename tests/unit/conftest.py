"""Fixtures of the unit tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    """The runner installs its own SIGTERM/SIGINT/SIGHUP handlers; pytest keeps its own."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
