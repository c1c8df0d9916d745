"""The report page in headless Chromium: what the live DOM holds, and the checks every page must
pass whatever run made it. Used by the browser tests (pages of canned artifacts) and by the
integration tests (pages the binaries wrote for real runs of the local cluster).

What a page must show is read from the run's own files (its JUnit and result.json), never from
the report's code, so a page that drops a test, a rank or a straggler mark fails.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import junitparser
from browser.chromium import Chromium

# What the page holds, read from the live DOM after layout.
FACTS_JS = """(() => {
  const all = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const viewport = window.innerHeight;
  return {
    summary: all('table.summary tbody tr').map(row => ({
      verdict: row.querySelector('[data-verdict]').dataset.verdict,
      // The name is the link; the badges beside it (canned, emulated) say where the data came from.
      test: row.cells[2].querySelector('a').innerText.trim(),
      badges: [...row.cells[2].querySelectorAll('.badge')].map(b => b.innerText.trim()),
      reason: row.cells[6].innerText.trim(),
      reasonVisible: row.cells[6].getBoundingClientRect().bottom <= viewport,
    })),
    sections: all('section.test').map(section => ({
      outcome: section.dataset.outcome,
      test: section.querySelector('h2').dataset.test,
      charts: all('svg.chart', section).map(svg => ({
        id: svg.id,
        ranks: all('[data-rank]', svg).map(e => Number(e.dataset.rank)),
        slow: all('[data-slow]', svg).map(e => Number(e.dataset.rank)),
        visibleMarks: all('[data-rank]', svg).filter(e => e.getBoundingClientRect().width > 0).length,
      })),
    })),
    links: all('a[href]').map(a => ({href: a.href, raw: a.getAttribute('href')})),
    ids: all('[id]').map(e => e.id),
    scripts: all('script').length,
    bodyText: document.body.innerText,
    background: getComputedStyle(document.body).backgroundColor,
  };
})()"""
# kubetest2's own phases, not a test binary's
RUNNER_JUNIT = "junit_runner.xml"


def page_facts(browser: Chromium, url: str, dark: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The DOM facts of the loaded page and every URL it requested."""
    with browser.page(dark=dark) as tab:
        tab.load(url)
        return tab.evaluate(FACTS_JS), tab.requested_urls()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@dataclass(frozen=True)
class RunTest:
    """One test or subtest as the run's files record it."""

    name: str
    outcome: str  # PASS | FAIL | SKIP | ERROR
    message: str
    result: dict[str, Any] | None  # its result.json, when the harness wrote one


def junit_outcome(case: junitparser.TestCase) -> tuple[str, str]:
    for result in case.result:
        kind = {junitparser.Failure: "FAIL", junitparser.Error: "ERROR", junitparser.Skipped: "SKIP"}.get(type(result))
        if kind:
            return kind, result.message or ""
    return "PASS", ""


def run_tests(artifacts: Path) -> list[RunTest]:
    """Every binary's tests and subtests in JUnit order, each with its result.json."""
    tests = []
    for junit in sorted(artifacts.glob("junit_*.xml")):
        if junit.name == RUNNER_JUNIT:
            continue
        for suite in junitparser.JUnitXml.fromfile(str(junit)):
            results = [json.loads(p.read_text()) for p in artifacts.glob(f"{suite.name}/**/result.json")]
            for case in suite:
                outcome, message = junit_outcome(case)
                result = next((r for r in results if r.get("test") == case.name), None)
                tests.append(RunTest(case.name, outcome, message, result))
    return tests


def check_run_page(browser: Chromium, artifacts: Path, screenshot: Path) -> dict[str, Any]:
    """The checks every run's report.html passes, from that run's own files: one row and one section
    per test with its verdict; every rank drawn and exactly the result's slow ranks marked; a
    failing test's reason on the first screen; every link a file in the artifacts folder and every
    pod log linked; no network request. Keeps a screenshot of the first screen. Returns the facts."""
    report = artifacts / "report.html"
    assert report.is_file(), f"no report.html in {artifacts}: {sorted(p.name for p in artifacts.iterdir())}"
    tests = run_tests(artifacts)
    assert tests, f"no test in the JUnit files of {artifacts}"
    facts, requested = page_facts(browser, report.as_uri())
    assert requested == [report.as_uri()], f"the page asked for more than itself: {requested}"
    assert facts["scripts"] == 0

    assert [(row["verdict"], row["test"]) for row in facts["summary"]] == [(t.outcome, t.name) for t in tests]
    sections = {s["test"]: s for s in facts["sections"]}
    for test in tests:
        section = sections[test.name]
        assert section["outcome"] == test.outcome
        ranks = ((test.result or {}).get("metrics") or {}).get("ranks") or []
        throughput = next((c for c in section["charts"] if c["id"].endswith("-throughput")), None)
        if not any((rank.get("values") or {}) for rank in ranks):
            continue
        assert throughput is not None, f"{test.name}: {len(ranks)} ranks and no throughput chart"
        assert sorted(throughput["ranks"]) == sorted(rank["rank"] for rank in ranks)
        assert throughput["visibleMarks"] == len(ranks), "every rank is drawn with a size"
        assert sorted(throughput["slow"]) == sorted(test.result["metrics"].get("slow_ranks") or [])

    for row, test in zip(facts["summary"], tests, strict=True):
        if test.outcome in ("FAIL", "ERROR"):
            assert row["reason"] == test.message.splitlines()[0]
            assert row["reasonVisible"], f"{test.name}: its reason is below the first screen (1280x800)"

    files = [Path(unquote(urlparse(link["href"]).path)) for link in facts["links"] if not link["raw"].startswith("#")]
    for target in files:
        assert target.is_file() and target.resolve().is_relative_to(artifacts.resolve()), f"{target}: not a file here"
    linked = {target.resolve() for target in files}
    logs = [log.resolve() for log in artifacts.glob("*/**/logs/*.log")]
    assert set(logs) <= linked, f"pod logs not linked: {sorted(str(p) for p in set(logs) - linked)}"

    with browser.page() as tab:
        tab.load(report.as_uri())
        assert png_size(tab.screenshot(screenshot)) == (1280, 800)
    return facts

