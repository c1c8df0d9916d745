"""The report's cost on large runs: page size, generation time, render time in headless Chromium.

Pages are generated from tests/report_fixtures.py (`large-256ranks`: 32 nodes x 8 ranks, one node
slow, 50 steps of loss per rank; `large-256nodes`: 256 nodes x 1 rank, 257 pods). Each figure prints
one line, `name: value unit  # how`; progress goes to stderr. Targets (issue 16): a 256-rank page
under 2 MB that renders in under 2 s.

    .venv/bin/python bench/report_bench.py [--runs 7] [SCENARIO...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from browser.chromium import REFUSING_PROXY, Chromium  # noqa: E402
from report_fixtures import write_scenario  # noqa: E402

from harness.report.page import write_report  # noqa: E402

# Navigation start to the second animation frame after the load event: by then the page has been
# parsed, styled, laid out and its first screen painted.
PAINTED_JS = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
LOAD_JS = "performance.getEntriesByType('navigation')[0].loadEventEnd"


def figure(name: str, value: float, unit: str, how: str) -> None:
    print(f"{name}: {value:.3g} {unit}  # {how}", flush=True)


def timed(action: Callable[[], object], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def render_times(report: Path, runs: int) -> tuple[list[float], list[float]]:
    """Per load in a fresh tab of one warm browser: (load event end, first screen painted), in ms."""
    loads, painted = [], []
    with Chromium(args=REFUSING_PROXY) as browser:
        for _ in range(runs + 1):  # the first load warms the browser's caches: not counted
            with browser.page() as tab:
                tab.load(report.as_uri())
                paint_ms = tab.evaluate(PAINTED_JS)
                loads.append(tab.evaluate(LOAD_JS))
                painted.append(paint_ms)
    return loads[1:], painted[1:]


def cold_render(url: str, runs: int) -> tuple[list[float], list[float]]:
    """A whole headless Chromium per run, wall clock: (start to first screen painted, start to exit)."""
    painted, whole = [], []
    for _ in range(runs):
        start = time.perf_counter()
        with Chromium(args=REFUSING_PROXY) as browser, browser.page() as tab:
            tab.load(url)
            tab.evaluate(PAINTED_JS)
            painted.append(time.perf_counter() - start)
        whole.append(time.perf_counter() - start)
    return painted, whole


def bench(scenario: str, runs: int, work: Path) -> None:
    artifacts = work / scenario
    print(f"[report-bench] {scenario}: writing the artifacts", file=sys.stderr)
    write_scenario(artifacts, scenario)
    json_bytes = sum(p.stat().st_size for p in artifacts.rglob("result.json"))
    generate = timed(lambda: write_report(artifacts), runs)
    report = artifacts / "report.html"
    figure(f"{scenario}.page_size", report.stat().st_size / 1e6, "MB",
           f"report.html (the result.json files: {json_bytes / 1e6:.2f} MB)")
    figure(f"{scenario}.generate", statistics.median(generate) * 1000, "ms",
           f"write_report median of {runs} (min {min(generate) * 1000:.0f} ms)")
    print(f"[report-bench] {scenario}: loading in headless Chromium", file=sys.stderr)
    loads, painted = render_times(report, runs)
    figure(f"{scenario}.render_painted", statistics.median(painted), "ms",
           f"navigation start to 2nd frame after load, fresh tab, warm browser, median of {runs} "
           f"(max {max(painted):.0f})")
    figure(f"{scenario}.render_load_event", statistics.median(loads), "ms", f"loadEventEnd, median of {runs}")
    cold_painted, cold_whole = cold_render(report.as_uri(), max(3, runs // 2))
    figure(f"{scenario}.render_cold", statistics.median(cold_painted), "s",
           f"start a new chromium, load, first screen painted; median of {len(cold_painted)} "
           f"(max {max(cold_painted):.2f} s)")
    figure(f"{scenario}.chromium_whole", statistics.median(cold_whole), "s",
           "the same plus closing the browser (Browser.close, process exit)")
    blank, _ = cold_render("about:blank", max(3, runs // 2))
    figure(f"{scenario}.chromium_start", statistics.median(blank), "s",
           "render_cold for about:blank: what starting the browser alone costs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", default=["large-256ranks", "large-256nodes"])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kt2t-report-bench-") as work:
        for scenario in args.scenarios:
            bench(scenario, args.runs, Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
