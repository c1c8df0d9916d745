"""Browser test fixtures: report pages generated from the canned artifacts, and one headless Chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from report_fixtures import ScenarioPage, write_pages

from .chromium import REFUSING_PROXY, Chromium, find_chromium

REPO = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="session")
def report_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ScenarioPage]:
    """Every fixture scenario's artifacts folder with its report.html."""
    return write_pages(tmp_path_factory.mktemp("report-pages"))


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
