"""Shared test paths."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Upstream logs the tests read, kept in the repository (tests/fixtures/README.md says where from).
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"test fixtures not found at {FIXTURES}")
    return FIXTURES
