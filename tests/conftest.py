"""Shared test paths."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The shared fixtures live beside the repo (../shared/fixtures); CI lays shared/ there too.
FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES
