"""Shared test paths, and one headless Chromium for every test that looks at a report page."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser.chromium import REFUSING_PROXY, Chromium, find_chromium

# The page checks shared by the browser and integration tests: their asserts explain themselves too.
pytest.register_assert_rewrite("report_in_browser")
# The presubmit and full tiers, opt-in tests, the root-only skip guard and the durations record.
pytest_plugins = ["tiers"]

REPO = Path(__file__).resolve().parent.parent
# Upstream logs the tests read, kept in the repository (tests/fixtures/README.md says where from).
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"test fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    if find_chromium() is None:
        pytest.fail("chromium is not installed: run hack/setup.sh (it installs Debian's chromium package)")
    with Chromium(args=REFUSING_PROXY) as chromium:
        yield chromium


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """Where screenshots go: $ARTIFACTS/browser (CI keeps it), default _artifacts/browser."""
    folder = Path(os.environ.get("ARTIFACTS") or REPO / "_artifacts") / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
