"""The report in a real browser: verdicts, rank counts, stragglers, links, themes, no network, screenshots.

Pages come from tests/report_fixtures.py (canned result.json shaped on real runs); what each page
must show is taken from those fixtures, not written here again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from report_fixtures import HOSTILE, FixtureTest, ScenarioPage
from report_in_browser import FACTS_JS, page_facts, png_size

from .chromium import Chromium


def fixture_metrics(test: FixtureTest) -> dict[str, Any]:
    return (test.result or {}).get("metrics") or {}


@pytest.mark.parametrize("name", ["passing-cpu-2ranks", "straggler-32ranks", "failed-pod", "nccl-sweep", "skipped",
                                  "error", "large-256ranks", "full-run"])
def test_page_shows_each_verdict_rank_count_and_straggler(browser: Chromium, report_pages: dict[str, ScenarioPage],
                                                          name: str) -> None:
    page = report_pages[name]
    facts, _ = page_facts(browser, page.url)
    assert [(row["verdict"], row["test"]) for row in facts["summary"]] == \
        [(t.outcome, t.name) for t in page.tests]
    assert [s["outcome"] for s in facts["sections"]] == [t.outcome for t in page.tests]
    for test, section in zip(page.tests, facts["sections"], strict=True):
        metrics = fixture_metrics(test)
        throughput = next((c for c in section["charts"] if c["id"].endswith("-throughput")), None)
        if not metrics.get("ranks"):
            assert throughput is None
            continue
        assert throughput is not None, f"{test.name}: no throughput chart"
        assert sorted(throughput["ranks"]) == [r["rank"] for r in metrics["ranks"]]
        assert throughput["visibleMarks"] == len(metrics["ranks"]), "every rank is drawn with a size"
        assert sorted(throughput["slow"]) == sorted(metrics["slow_ranks"])


@pytest.mark.parametrize("name", ["straggler-32ranks", "failed-pod", "error", "large-256ranks", "full-run"])
def test_failing_reason_is_visible_without_scrolling(browser: Chromium, report_pages: dict[str, ScenarioPage],
                                                     name: str) -> None:
    page = report_pages[name]
    facts, _ = page_facts(browser, page.url)
    failing = [row for row in facts["summary"] if row["verdict"] in ("FAIL", "ERROR")]
    assert failing
    for row, test in zip(failing, [t for t in page.tests if t.outcome in ("FAIL", "ERROR")], strict=True):
        assert row["reason"] == test.message.splitlines()[0]
        assert row["reasonVisible"], f"{row['test']}: its reason is below the first screen (1280x800)"


@pytest.mark.parametrize("name", ["passing-cpu-2ranks", "straggler-32ranks", "failed-pod", "nccl-sweep", "error",
                                  "full-run"])
def test_links_resolve_to_files_in_the_artifacts_folder(browser: Chromium, report_pages: dict[str, ScenarioPage],
                                                        name: str) -> None:
    page = report_pages[name]
    facts, _ = page_facts(browser, page.url)
    files = [link for link in facts["links"] if not link["raw"].startswith("#")]
    assert files, "the page links no file"
    for link in files:
        url = urlparse(link["href"])
        target = Path(unquote(url.path))
        assert url.scheme == "file" and target.is_file(), f"{link['raw']} resolves to {link['href']}, not a file"
        assert target.resolve().is_relative_to(page.artifacts.resolve())
    anchors = [link["raw"][1:] for link in facts["links"] if link["raw"].startswith("#")]
    assert anchors and set(anchors) <= set(facts["ids"])


def test_every_pod_log_is_linked(browser: Chromium, report_pages: dict[str, ScenarioPage]) -> None:
    page = report_pages["failed-pod"]
    facts, _ = page_facts(browser, page.url)
    linked = {Path(unquote(urlparse(link["href"]).path)).name for link in facts["links"]}
    logs = [Path(log).name for pod in page.tests[0].result["pods"] for log in pod["logs"]]
    assert logs and set(logs) <= linked


@pytest.mark.parametrize("name", sorted(["passing-cpu-2ranks", "straggler-32ranks", "failed-pod", "nccl-sweep",
                                         "skipped", "error", "large-256ranks", "large-256nodes", "hostile",
                                         "full-run"]))
def test_page_makes_no_network_request(browser: Chromium, report_pages: dict[str, ScenarioPage], name: str) -> None:
    """DevTools reports every request a page asks for, even those the page's CSP then blocks."""
    page = report_pages[name]
    with browser.page() as tab:
        tab.load(page.url)
        tab.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        assert tab.requested_urls() == [page.url]
        assert [e for e in tab.log_entries() if e.get("source") in ("network", "security")] == []


def test_the_request_detector_sees_external_resources(browser: Chromium, tmp_path: Path) -> None:
    """The check above can fail: a page with a font, a stylesheet and an image from elsewhere is caught,
    with and without a CSP like the report's."""
    external = ('<link rel="stylesheet" href="https://cdn.example.com/a.css"><style>@font-face{font-family:x;'
                'src:url(https://fonts.example.com/x.woff2)}body{font-family:x}</style>'
                '<img src="http://example.com/x.png">text')
    csp = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
    for head in ("", csp):
        path = tmp_path / f"external{len(head)}.html"
        path.write_text(f"<!DOCTYPE html><html><head>{head}</head><body>{external}</body></html>")
        with browser.page() as tab:
            tab.load(path.as_uri())
            tab.evaluate("new Promise(r => setTimeout(r, 200))")
            requested = tab.requested_urls()
        assert "https://cdn.example.com/a.css" in requested and "http://example.com/x.png" in requested


def test_hostile_names_stay_text(browser: Chromium, report_pages: dict[str, ScenarioPage]) -> None:
    """A pod name holding </script><script>alert(1)</script> and an <img> runs nothing and loads nothing."""
    page = report_pages["hostile"]
    with browser.page() as tab:
        tab.load(page.url)
        facts = tab.evaluate(FACTS_JS)
        dialogs = tab.dialogs()
        images = tab.evaluate("document.images.length")
    assert facts["scripts"] == 0 and dialogs == [] and images == 0
    assert HOSTILE in facts["bodyText"]
    hrefs = [link["href"] for link in facts["links"]]
    assert not any("passwd" in h or "hostname" in h or h.startswith("javascript:") for h in hrefs)


def test_dark_theme_follows_the_system(browser: Chromium, report_pages: dict[str, ScenarioPage]) -> None:
    light, _ = page_facts(browser, report_pages["straggler-32ranks"].url)
    dark, _ = page_facts(browser, report_pages["straggler-32ranks"].url, dark=True)
    assert light["background"] == "rgb(255, 255, 255)"
    assert dark["background"] != light["background"]


@pytest.mark.parametrize("name", ["passing-cpu-2ranks", "straggler-32ranks", "failed-pod", "nccl-sweep",
                                  "large-256ranks", "full-run"])
def test_screenshot_kept_as_an_artifact(browser: Chromium, report_pages: dict[str, ScenarioPage], screenshots: Path,
                                        name: str) -> None:
    """The first screen of each page (what a CI user sees on opening it), light and dark, and the whole
    page in light; kept under $ARTIFACTS/browser/."""
    page = report_pages[name]
    for dark in (False, True):
        with browser.page(dark=dark) as tab:
            tab.load(page.url)
            first = tab.screenshot(screenshots / f"{name}{'-dark' if dark else ''}.png")
            if not dark:
                whole = tab.screenshot(screenshots / f"{name}-full.png", full_page=True)
                assert png_size(whole)[1] >= png_size(first)[1]
        assert png_size(first) == (1280, 800)
