"""harness.report.page on canned artifacts (tests/report_fixtures.py): the page's DOM, links, escaping, size, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from report_fixtures import HOSTILE, SCENARIOS, FixtureTest, write_pages

from harness.report.charts import fmt_bytes, log2_ticks, nice_ticks, thin, tick_text
from harness.report.page import main, write_report

REPO = Path(__file__).resolve().parents[4]
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "source", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def walk(self) -> list[Node]:
        found = [self]
        for child in self.children:
            found += child.walk()
        return found

    def find(self, tag: str | None = None, css: str | None = None, **attrs: str) -> list[Node]:
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and (css is None or css in n.attrs.get("class", "").split())
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)


class TreeBuilder(HTMLParser):
    """A DOM of the page as html.parser reads it (SVG elements included, self-closing or not)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)


def parse(path: Path) -> Node:
    builder = TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    return builder.root


@dataclass
class Page:
    artifacts: Path
    report: Path
    tests: list[FixtureTest]
    dom: Node


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Page]:
    written = write_pages(tmp_path_factory.mktemp("reports"))
    return {name: Page(p.artifacts, p.report, p.tests, parse(p.report)) for name, p in written.items()}


def summary_rows(dom: Node) -> list[Node]:
    table = dom.find("table", css="summary")[0]
    return table.find("tbody")[0].find("tr")


def chart(dom: Node, suffix: str) -> Node | None:
    found = [svg for svg in dom.find("svg") if svg.attrs.get("id", "").endswith(suffix)]
    return found[0] if found else None


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n != "hostile"])
def test_summary_lists_each_test_with_verdict_time_and_reason(pages: dict[str, Page], name: str) -> None:
    page = pages[name]
    rows = summary_rows(page.dom)
    assert len(rows) == len(page.tests)
    for row, test in zip(rows, page.tests, strict=True):
        cells = row.find("td")
        assert cells[0].find("span", css="verdict")[0].attrs["data-verdict"] == test.outcome
        assert cells[2].find("a")[0].all_text() == test.name
        assert cells[6].all_text() == (test.message.splitlines()[0] if test.message else "")
        assert cells[3].all_text().endswith(("s", "min"))


@pytest.mark.parametrize(("name", "shape"), [("straggler-32ranks", "rect"), ("large-256ranks", "circle"),
                                             ("large-256nodes", "circle"), ("passing-cpu-2ranks", "rect")])
def test_every_rank_is_drawn_and_slow_ranks_are_marked(pages: dict[str, Page], name: str, shape: str) -> None:
    page = pages[name]
    metrics = page.tests[0].result["metrics"]
    for suffix in ("-throughput", "-probe") if metrics.get("probe") else ("-throughput",):
        svg = chart(page.dom, suffix)
        assert svg is not None
        marks = [n for n in svg.walk() if "data-rank" in n.attrs]
        assert sorted(int(n.attrs["data-rank"]) for n in marks) == [r["rank"] for r in metrics["ranks"]]
        slow = sorted(int(n.attrs["data-rank"]) for n in marks if n.attrs.get("data-slow") == "true")
        assert slow == sorted(metrics["slow_ranks"])
        healthy = [n for n in marks if "data-slow" not in n.attrs]
        assert healthy and all(n.tag == shape for n in healthy)
        labels = [n.attrs.get("class", "") for n in svg.walk() if n.tag == "text"]
        assert any("hline-label ref" in c for c in labels) and any("hline-label thr" in c for c in labels)
    ranks = page.dom.find("span", css="rank-count")[0]
    assert ranks.attrs["data-ranks"] == str(len(metrics["ranks"]))


def hrefs(dom: Node) -> list[str]:
    return [n.attrs["href"] for n in dom.walk() if n.tag == "a" and "href" in n.attrs]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_links_resolve_to_files_inside_the_artifacts_folder(pages: dict[str, Page], name: str) -> None:
    page = pages[name]
    ids = {n.attrs["id"] for n in page.dom.walk() if "id" in n.attrs}
    for href in hrefs(page.dom):
        if href.startswith("#"):
            assert href[1:] in ids
            continue
        target = (page.report.parent / unquote(href)).resolve()
        assert target.is_file(), f"{href} does not resolve to a file"
        assert target.is_relative_to(page.artifacts.resolve())


def test_each_pod_log_is_linked_and_missing_ones_say_so(pages: dict[str, Page]) -> None:
    page = pages["failed-pod"]
    linked = {unquote(h) for h in hrefs(page.dom)}
    for pod in page.tests[0].result["pods"]:
        for log in pod["logs"]:
            assert f"e2e-nvidia-training/TestBertTraining/{log}" in linked
    hostile = pages["hostile"].dom
    assert len(hostile.find("span", css="missing-file")) == 3  # ../../etc/passwd, /etc/hostname, javascript:


def test_links_are_relative_to_the_page_when_written_elsewhere(pages: dict[str, Page], tmp_path: Path) -> None:
    source = pages["straggler-32ranks"]
    out = write_report(source.artifacts, source.artifacts / "sub" / "dir" / "copy.html")
    links = [h for h in hrefs(parse(out)) if not h.startswith("#")]
    assert links and all(h.startswith("../../") for h in links)
    assert all((out.parent / unquote(h)).is_file() for h in links)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_page_references_nothing_outside_itself(pages: dict[str, Page], name: str) -> None:
    dom = pages[name].dom
    for node in dom.walk():
        for key, value in node.attrs.items():
            if key in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                assert not value.lower().startswith(("http:", "https:", "//", "javascript:", "ftp:")), (key, value)
    style = "".join(n.all_text() for n in dom.find("style"))
    assert "url(" not in style and "@import" not in style
    assert dom.find("script") == [] and dom.find("link") == [] and dom.find("img") == []
    csp = [n for n in dom.find("meta") if n.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0].attrs["content"]


def test_hostile_text_is_escaped(pages: dict[str, Page]) -> None:
    page = pages["hostile"]
    raw = page.report.read_text(encoding="utf-8")
    assert "<script" not in raw.lower() and "<img" not in raw.lower()
    assert not any(ch in raw for ch in "\x00\x1b\ud800")
    assert not [k for n in page.dom.walk() for k in n.attrs if k.startswith("on")]
    assert HOSTILE in page.dom.all_text()
    assert "\ufffd surrogate" in page.dom.all_text() and "[31m" not in page.dom.all_text()


def test_svg_charts_are_labelled_for_screen_readers(pages: dict[str, Page]) -> None:
    for name in ("straggler-32ranks", "nccl-sweep", "failed-pod", "large-256ranks"):
        for svg in pages[name].dom.find("svg", css="chart"):
            title, desc = svg.find("title")[0], svg.find("desc")[0]
            assert svg.attrs["role"] == "img"
            assert svg.attrs["aria-labelledby"] == f"{title.attrs['id']} {desc.attrs['id']}"
            assert title.all_text() and len(desc.all_text()) > 30
            assert svg.find("text", css="axis-label")


def test_each_rank_and_sweep_chart_has_a_data_table(pages: dict[str, Page]) -> None:
    for name, charts in (("straggler-32ranks", 3), ("nccl-sweep", 1), ("large-256ranks", 3)):
        sections = pages[name].dom.find("section", css="test")
        assert len(sections[0].find("table", css="data")) == charts


def test_failing_reason_comes_before_everything_else_of_its_test(pages: dict[str, Page]) -> None:
    section = pages["straggler-32ranks"].dom.find("section", css="test")[0]
    order = [n.attrs.get("class", "") or n.tag for n in section.walk() if n.tag in ("div", "h3", "svg")]
    assert order[0] == "failure"
    assert section.find("div", css="failure")[0].find("p", css="message")[0].all_text() == \
        pages["straggler-32ranks"].tests[0].message


def test_a_test_without_result_json_is_shown_from_junit(pages: dict[str, Page]) -> None:
    sections = pages["error"].dom.find("section", css="test")
    mnist = next(s for s in sections if s.find("h2")[0].attrs["data-test"] == "TestMNISTTraining")
    assert mnist.attrs["data-outcome"] == "FAIL"
    assert "no result.json" in mnist.all_text()
    assert any(h.endswith("mnist-training-0-zz9kq.log") for h in hrefs(mnist))


@pytest.mark.parametrize("name", ["large-256ranks", "large-256nodes"])
def test_a_256_rank_page_stays_under_2_mb(pages: dict[str, Page], name: str) -> None:
    assert pages[name].report.stat().st_size < 2 * 1024 * 1024


def test_long_pod_lists_fold_with_troubled_pods_above(tmp_path: Path) -> None:
    from report_fixtures import fixture, pod, result, write_artifacts

    pods = [pod(f"w-{i}", f"n-{i}") for i in range(40)] + [pod("bad", "n-x", phase="Failed", exit_code=3,
                                                                reason="Error")]
    res = result("e2e-nvidia-training", "TestBertTraining", "FAIL", 3.0, message="pod bad failed", pods=pods)
    write_artifacts(tmp_path, [fixture(res, {})])
    dom = parse(write_report(tmp_path))
    tables = dom.find("table", css="pods")
    assert len(tables) == 2 and len(tables[0].find("tbody")[0].find("tr")) == 1
    folded = [d for d in dom.find("details") if d.find("summary")[0].all_text() == "all 41 pods"]
    assert folded and "open" not in folded[0].attrs and tables[1] in folded[0].walk()


def test_events_of_a_long_failure_are_those_nearest_it(tmp_path: Path) -> None:
    from report_fixtures import events_txt, fixture, result, write_artifacts

    events = [{"time": f"2026-11-30T21:{m:02d}:{s:02d}Z", "type": "Normal", "object": "Pod/p", "reason": "Pulled",
               "message": f"e{m}-{s}"} for m in range(33, 43) for s in range(60)]
    events.append({"time": "2026-11-30T21:40:00.5Z", "type": "Warning", "object": "Pod/p", "reason": "BackOff",
                   "message": "the failure"})
    res = result("e2e-nvidia-training", "TestBertTraining", "FAIL", 600.0, message="failed", events=events)
    write_artifacts(tmp_path, [fixture(res, {"events.txt": events_txt(events)})])
    dom = parse(write_report(tmp_path))
    rows = dom.find("table", css="events")[0].find("tbody")[0].find("tr")
    assert len(rows) == 200
    times = [r.find("td")[0].all_text() for r in rows]
    assert "2026-11-30T21:40:00.5Z" in times and "2026-11-30T21:33:00Z" not in times
    assert any(h.endswith("events.txt") for h in hrefs(dom))


def test_unreadable_and_odd_result_json_still_render(tmp_path: Path) -> None:
    folder = tmp_path / "e2e-nvidia-training"
    (folder / "TestBroken").mkdir(parents=True)
    (folder / "TestBroken" / "result.json").write_text("{not json")
    (folder / "TestOdd").mkdir()
    (folder / "TestOdd" / "result.json").write_text(json.dumps({
        "outcome": "weird", "elapsed_s": "slow", "checks": "none", "config": [1], "pods": [{"name": 5}],
        "metrics": {"throughput": {"key": "throughput", "unit": "samples/s"},
                    "ranks": [{"rank": 0, "values": {"throughput": float("nan")}}, {"rank": "x"},
                              {"rank": 1, "node": "n", "values": {"throughput": 3.0}, "steps": [[0, 1], "x"]}]}}))
    dom = parse(write_report(tmp_path))
    outcomes = {s.find("h2")[0].attrs["data-test"]: s.attrs["data-outcome"] for s in dom.find("section", css="test")}
    assert outcomes == {"TestBroken": "ERROR", "TestOdd": "ERROR"}
    assert "result.json unreadable" in dom.all_text()
    marks = [n for n in chart(dom, "-throughput").walk() if "data-rank" in n.attrs]
    assert sorted(n.attrs["data-rank"] for n in marks) == ["0", "1"]
    assert [n.tag for n in marks if n.attrs["data-rank"] == "0"] == ["text"]  # NaN: drawn as "no value"


def test_cli_writes_the_page_and_prints_its_path(pages: dict[str, Page], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main([str(pages["failed-pod"].artifacts), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert oct(out.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("kind", ["empty", "missing"])
def test_cli_exits_2_naming_a_folder_without_artifacts(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "nothing-here"
    if kind == "empty":
        folder.mkdir()
    run = subprocess.run([sys.executable, "-m", "harness.report", str(folder)], capture_output=True, text=True,
                         cwd=REPO, check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2
    assert str(folder) in run.stderr and "expected a run's artifacts folder" in run.stderr
    assert not (folder / "report.html").exists()


def test_report_imports_no_torch() -> None:
    code = "import sys, harness.report.page; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert run.stdout.strip() == "False"


def test_chart_helpers() -> None:
    assert nice_ticks(0, 9.93) == [0, 2, 4, 6, 8, 10]
    assert [tick_text(t, [0, 0.5]) for t in (0, 0.5)] == ["0.0", "0.5"]
    assert tick_text(600, [0, 200]) == "600"
    assert fmt_bytes(8) == "8 B" and fmt_bytes(2 ** 34) == "16 GiB" and fmt_bytes(1536) == "1.5 KiB"
    assert log2_ticks(8, 2 ** 34)[0] == 8 and len(log2_ticks(8, 2 ** 34)) <= 9
    points = [(float(i), float(i)) for i in range(1000)]
    assert len(thin(points, 100)) <= 101 and thin(points, 100)[-1] == points[-1]


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2026-11-30T21:40:00.5Z", "2026-11-30T21:40:00.500000+00:00"),
    ("2026-11-30T21:40:00.123456789Z", "2026-11-30T21:40:00.123456+00:00"),
    # The offset's digits are not the fraction's: they once were, and the time moved and lost its zone.
    ("2026-11-30T21:40:00.25+02:00", "2026-11-30T21:40:00.250000+02:00"),
    ("2026-11-30T21:40:00Z", "2026-11-30T21:40:00+00:00"),
])
def test_event_times_parse_with_any_fraction_and_offset(stamp: str, expected: str):
    from harness.report.html import parse_time

    parsed = parse_time(stamp)
    assert parsed is not None and parsed.isoformat() == expected, parsed
