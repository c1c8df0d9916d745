"""Browser test fixtures: report pages generated from the canned artifacts (the browser itself and
the screenshots folder are tests/conftest.py's, shared with the integration tests)."""

from __future__ import annotations

import pytest
from report_fixtures import ScenarioPage, write_pages


@pytest.fixture(scope="session")
def report_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ScenarioPage]:
    """Every fixture scenario's artifacts folder with its report.html."""
    return write_pages(tmp_path_factory.mktemp("report-pages"))
