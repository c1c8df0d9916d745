"""Reads a run's artifacts (result.json per test, the JUnit files) into typed records for the report.

Readers of docs/ARTIFACTS.md's `result.json` (schema 1): unknown keys are ignored, a value of the
wrong type counts as absent, and a file that cannot be read becomes a record that says why, so
the report renders whatever the harness managed to write. JUnit fills in what result.json lacks
(a test that has no result.json, the run's configuration).
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTCOMES = ("PASS", "FAIL", "SKIP", "ERROR")
RUNNER_JUNIT = "junit_runner.xml"  # kubetest2's own phases (Build/Up/Test/Down), not a test binary's


class NoArtifacts(ValueError):
    """The folder holds neither a JUnit file nor a result.json."""


@dataclass
class Check:
    name: str
    status: str  # pass | fail | not-applicable | informational
    message: str = ""
    measured: float | None = None
    expected: float | None = None
    unit: str = ""
    execution: str = ""  # harness.verdict.checks.EMULATED: judged on the local cluster's emulated capacity


@dataclass
class ConfigValue:
    value: str
    source: str = ""
    origin: str = ""


@dataclass
class Rank:
    rank: int
    pod: str = ""
    node: str = ""
    values: dict[str, float | None] = field(default_factory=dict)
    steps: list[tuple[float, float]] = field(default_factory=list)  # (step, loss), in step order


@dataclass
class ReferenceLines:
    reference: float | None = None
    threshold: float | None = None
    how: str = ""


@dataclass
class BusbwRow:
    size: float
    out_of_place_gbps: float | None
    in_place_gbps: float | None


@dataclass
class Busbw:
    rows: list[BusbwRow]
    floor_gbps: float | None = None
    floor_source: str = ""
    judged_sizes: list[float] = field(default_factory=list)
    average_gbps: float | None = None


@dataclass
class Minimum:
    key: str
    value: float
    source: str = ""  # how the floor was derived (formula and sources, a baseline file's line, a setting)
    origin: str = ""  # table, baseline or setting
    margin: float | None = None  # the lowest rank's figure / the floor


@dataclass
class Metrics:
    workload: str = ""
    world_size: int | None = None
    throughput_key: str = ""
    throughput_unit: str = ""
    probe_key: str = ""
    probe_unit: str = ""
    ranks: list[Rank] = field(default_factory=list)
    aggregate: dict[str, dict[str, float | None]] = field(default_factory=dict)
    references: dict[str, ReferenceLines] = field(default_factory=dict)
    minimum: Minimum | None = None
    slow_ranks: set[int] = field(default_factory=set)
    busbw: Busbw | None = None


@dataclass
class Container:
    name: str
    exit_code: int | None = None
    reason: str = ""
    restarts: int = 0
    signal: int | None = None


@dataclass
class Pod:
    name: str
    node: str = ""
    phase: str = ""
    execution: str = ""
    containers: list[Container] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)  # relative to the test's folder


@dataclass
class Event:
    time: str
    type: str = ""
    object: str = ""
    reason: str = ""
    message: str = ""


@dataclass
class TestResult:
    """One test or subtest, from its result.json or, lacking one, from its JUnit testcase."""

    binary: str
    test: str
    outcome: str
    folder: Path  # the test's artifacts folder (paths in the record are relative to it)
    source: str  # "result.json" or the JUnit file's name
    message: str = ""
    detail: str = ""
    started: str = ""
    elapsed_s: float | None = None
    execution: str = ""
    config: dict[str, ConfigValue] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    metrics: Metrics | None = None
    junit_properties: dict[str, str] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what could not be read, shown on the page
    node_pairs: list[PairNode] = field(default_factory=list)  # TestNodePairs: each node in both passes


@dataclass(frozen=True)
class PairNode:
    """One node of TestNodePairs: its partners, group figure (GB/s) and slowness in each pass."""

    node: str
    partners: tuple[str, str]  # pass 1, pass 2, comma-separated
    busbw_gbps: tuple[float | None, float | None]
    thresholds: tuple[float | None, float | None]
    slow: tuple[bool, bool]
    failed: bool


def _node_pairs(raw: Any) -> list[PairNode]:
    nodes = []
    for name, raw_entry in _dict(_dict(raw).get("nodes")).items():
        entry = _dict(raw_entry)
        partners = [", ".join(map(str, p)) if isinstance(p, list) else "" for p in (entry.get("partners") or [])]
        figures = [_number(v) for v in (entry.get("busbw_gbps") or [])]
        thresholds = [_number(v) for v in (entry.get("thresholds") or [])]
        slow = [v is True for v in (entry.get("slow") or [])]
        if len(partners) == len(figures) == len(thresholds) == len(slow) == 2:
            nodes.append(PairNode(str(name), (partners[0], partners[1]), (figures[0], figures[1]),
                                  (thresholds[0], thresholds[1]), (slow[0], slow[1]), entry.get("failed") is True))
    return sorted(nodes, key=lambda n: n.node)


@dataclass
class Run:
    """Everything the report shows about one artifacts folder."""

    artifacts: Path
    tests: list[TestResult]
    junit_files: list[Path]
    suite_config: dict[str, ConfigValue]
    metadata: dict[str, str]


# ---- tolerant accessors: a value of the wrong type counts as absent ----

def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _whole(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


# ---- result.json ----

def _checks(raw: Any) -> list[Check]:
    return [Check(name=_text(c.get("name")) or "?", status=_text(c.get("status")) or "?",
                  message=_text(c.get("message")), measured=_number(c.get("measured")),
                  expected=_number(c.get("expected")), unit=_text(c.get("unit")),
                  execution=_text(c.get("execution")))
            for c in _dicts(raw)]


def _config(raw: Any) -> dict[str, ConfigValue]:
    config = {}
    for name, raw_entry in _dict(raw).items():
        entry = _dict(raw_entry)
        value = entry.get("value")
        shown = value if isinstance(value, str) else json.dumps(value)
        config[str(name)] = ConfigValue(shown, _text(entry.get("source")), _text(entry.get("origin")))
    return config


def _steps(raw: Any) -> list[tuple[float, float]]:
    # The numbers as decoded, not float() copies: 8,000 ranks x 130 steps are a million pairs.
    return [(pair[0], pair[1]) for pair in (raw if isinstance(raw, list) else [])
            if isinstance(pair, list) and len(pair) == 2 and _number(pair[0]) is not None
            and _number(pair[1]) is not None]


def _ranks(raw: Any) -> list[Rank]:
    ranks = []
    for entry in _dicts(raw):
        rank = _whole(entry.get("rank"))
        if rank is None:
            continue
        values = {str(k): _number(v) for k, v in _dict(entry.get("values")).items()}
        ranks.append(Rank(rank, _text(entry.get("pod")), _text(entry.get("node")), values,
                          _steps(entry.get("steps"))))
    return sorted(ranks, key=lambda r: r.rank)


def _references(raw: Any) -> tuple[dict[str, ReferenceLines], Minimum | None]:
    lines, minimum = {}, None
    for key, raw_entry in _dict(raw).items():
        entry = _dict(raw_entry)
        if key == "minimum":
            value = _number(entry.get("value"))
            if value is not None:
                minimum = Minimum(_text(entry.get("key")), value, _text(entry.get("source")),
                                  _text(entry.get("origin")), _number(entry.get("margin")))
            continue
        lines[str(key)] = ReferenceLines(_number(entry.get("reference")), _number(entry.get("threshold")),
                                         _text(entry.get("how")))
    return lines, minimum


def _busbw(raw: Any) -> Busbw | None:
    entry = _dict(raw)
    rows = [BusbwRow(size, _number(row.get("out_of_place_gbps")), _number(row.get("in_place_gbps")))
            for row in _dicts(entry.get("rows")) if (size := _number(row.get("size"))) is not None]
    if not rows:
        return None
    judged = [n for n in (_number(s) for s in entry.get("judged_sizes") or []) if n is not None] \
        if isinstance(entry.get("judged_sizes"), list) else []
    return Busbw(sorted(rows, key=lambda r: r.size), _number(entry.get("floor_gbps")),
                 _text(entry.get("floor_source")), judged, _number(entry.get("average_gbps")))


def _key_and_unit(raw: Any) -> tuple[str, str]:
    entry = _dict(raw)
    return _text(entry.get("key")), _text(entry.get("unit"))


def _metrics(raw: Any) -> Metrics | None:
    if not isinstance(raw, dict):
        return None
    ranks = _ranks(raw.get("ranks"))
    references, minimum = _references(raw.get("references"))
    throughput_key, throughput_unit = _key_and_unit(raw.get("throughput"))
    probe_key, probe_unit = _key_and_unit(raw.get("probe"))
    if not probe_key:  # schema 1 names no probe: take the first per-rank value called probe_*
        probe_key = next((k for r in ranks for k in r.values if k.startswith("probe_")), "")
    aggregate = {str(k): {str(s): _number(v) for s, v in _dict(stats).items()}
                 for k, stats in _dict(raw.get("aggregate")).items()}
    slow = {n for n in (_whole(v) for v in raw.get("slow_ranks") or []) if n is not None} \
        if isinstance(raw.get("slow_ranks"), list) else set()
    return Metrics(_text(raw.get("workload")), _whole(raw.get("world_size")), throughput_key, throughput_unit,
                   probe_key, probe_unit, ranks, aggregate, references, minimum, slow, _busbw(raw.get("busbw")))


def _pods(raw: Any) -> list[Pod]:
    pods = []
    for entry in _dicts(raw):
        containers = [Container(_text(c.get("name")), _whole(c.get("exit_code")), _text(c.get("reason")),
                                _whole(c.get("restarts")) or 0, _whole(c.get("signal")))
                      for c in _dicts(entry.get("containers"))]
        logs = [log for log in entry.get("logs") or [] if isinstance(log, str)] \
            if isinstance(entry.get("logs"), list) else []
        pods.append(Pod(_text(entry.get("name")), _text(entry.get("node")), _text(entry.get("phase")),
                        _text(entry.get("execution")), containers, logs))
    return pods


def _events(raw: Any) -> list[Event]:
    events = [Event(_text(e.get("time")), _text(e.get("type")), _text(e.get("object")), _text(e.get("reason")),
                    _text(e.get("message"))) for e in _dicts(raw)]
    return sorted(events, key=lambda e: e.time)


def read_result(path: Path, binary_hint: str) -> TestResult:
    """One result.json; a file that cannot be read gives an ERROR record saying why."""
    folder = path.parent
    try:
        raw = json.loads(path.read_bytes())
        if not isinstance(raw, dict):
            raise ValueError(f"expected a JSON object, found {type(raw).__name__}")
    except (OSError, ValueError) as err:
        name = folder.name
        return TestResult(binary_hint, name, "ERROR", folder, "result.json",
                          message=f"result.json unreadable: {err}", problems=[f"{path}: {err}"])
    outcome = _text(raw.get("outcome")).upper()
    problems = [] if outcome in OUTCOMES else [f"outcome {raw.get('outcome')!r} is not one of {', '.join(OUTCOMES)}"]
    return TestResult(
        binary=_text(raw.get("binary")) or binary_hint, test=_text(raw.get("test")) or folder.name,
        outcome=outcome if outcome in OUTCOMES else "ERROR", folder=folder, source="result.json",
        message=_text(raw.get("message")), detail=_text(raw.get("detail")), started=_text(raw.get("started")),
        elapsed_s=_number(raw.get("elapsed_s")), execution=_text(raw.get("execution")),
        config=_config(raw.get("config")), checks=_checks(raw.get("checks")), metrics=_metrics(raw.get("metrics")),
        pods=_pods(raw.get("pods")), events=_events(raw.get("events")), problems=problems,
        node_pairs=_node_pairs(raw.get("node_pairs")))


# ---- JUnit ----

@dataclass
class JUnitCase:
    binary: str
    test: str
    outcome: str
    elapsed_s: float | None
    message: str
    detail: str
    properties: dict[str, str]


def _junit_outcome(case: ET.Element) -> tuple[str, str, str]:
    for tag, outcome in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
        element = case.find(tag)
        if element is not None:
            return outcome, element.get("message") or "", element.text or ""
    return "PASS", "", ""


def _properties(element: ET.Element) -> dict[str, str]:
    props = element.find("properties")
    if props is None:
        return {}
    return {p.get("name") or "": p.get("value") or "" for p in props.findall("property")}


# What the page shows of the JUnit properties: the configuration (suites) and the aggregate metrics
# (tests). Every rank's own properties and the logs in <system-out> stay in the file: at 8,000 ranks
# they are 240,000 elements and 16 MiB of text, which a whole-tree parse held at once (+300 MiB).
SHOWN_PROPERTIES = ("config.", "metrics.")
DROPPED_ELEMENTS = frozenset({"system-out", "system-err"})


def _not_shown(element: ET.Element) -> bool:
    if element.tag == "property":
        return not (element.get("name") or "").startswith(SHOWN_PROPERTIES)
    return element.tag in DROPPED_ELEMENTS


def read_junit(path: Path) -> tuple[list[JUnitCase], dict[str, str]]:
    """The test cases of one junit_<binary>.xml and its suites' properties (those the page shows),
    read as a stream: each element the page does not need is dropped as soon as it has been read."""
    cases, suite_properties = [], {}
    open_elements: list[ET.Element] = []
    for event, element in ET.iterparse(path, events=("start", "end")):
        if event == "start":
            open_elements.append(element)
            continue
        open_elements.pop()
        parent = open_elements[-1] if open_elements else None
        if parent is not None and _not_shown(element):
            parent.remove(element)
        elif element.tag == "testcase":
            binary = (parent.get("name") if parent is not None else None) or path.stem.removeprefix("junit_")
            outcome, message, detail = _junit_outcome(element)
            elapsed = _number(_float_or_none(element.get("time")))
            cases.append(JUnitCase(binary, element.get("name") or "?", outcome, elapsed, message, detail,
                                   _properties(element)))
            if parent is not None:
                parent.remove(element)
        elif element.tag == "testsuite":
            suite_properties.update(_properties(element))
    return cases, suite_properties


def _float_or_none(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def config_from_properties(properties: dict[str, str]) -> dict[str, ConfigValue]:
    """`config.<name>` and `config.<name>.source` JUnit properties as config values."""
    config = {}
    for key, value in properties.items():
        if key.startswith("config.") and not key.endswith(".source"):
            name = key.removeprefix("config.")
            config[name] = ConfigValue(value, properties.get(f"{key}.source", ""))
    return config


def _from_junit(case: JUnitCase, artifacts: Path, junit_name: str) -> TestResult:
    return TestResult(case.binary, case.test, case.outcome, artifacts / case.binary / case.test, junit_name,
                      message=case.message.splitlines()[0] if case.message else "", detail=case.detail,
                      elapsed_s=case.elapsed_s,
                      junit_properties={k: v for k, v in case.properties.items() if k.startswith("metrics.")},
                      problems=["no result.json: shown from the JUnit file"])


# ---- the whole folder ----

def _result_paths(artifacts: Path) -> list[tuple[str, Path]]:
    found = []
    for binary_dir in sorted(p for p in artifacts.iterdir() if p.is_dir()):
        found.extend((binary_dir.name, path) for path in sorted(binary_dir.rglob("result.json")))
    return found


def _metadata(artifacts: Path) -> dict[str, str]:
    try:
        raw = json.loads((artifacts / "metadata.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in _dict(raw).items() if isinstance(v, str)}


def _merge(results: list[TestResult], cases: list[tuple[JUnitCase, str]], artifacts: Path) -> list[TestResult]:
    """Tests in the JUnit files' order (the run's), each from its result.json when there is one, else from
    JUnit; then result.json records that no JUnit file names (a run cut short), by start time."""
    by_name = {(r.binary, r.test): r for r in results}
    merged = []
    for case, junit_name in cases:
        result = by_name.pop((case.binary, case.test), None)
        if result is None:
            merged.append(_from_junit(case, artifacts, junit_name))
            continue
        result.junit_properties = {k: v for k, v in case.properties.items() if k.startswith("metrics.")}
        if result.elapsed_s is None:
            result.elapsed_s = case.elapsed_s
        if result.outcome != case.outcome:
            result.problems.append(f"JUnit says {case.outcome}, result.json says {result.outcome}")
        merged.append(result)
    return merged + sorted(by_name.values(), key=lambda r: (r.started, r.binary, r.test))


def read_run(artifacts: Path) -> Run:
    """Every test of an artifacts folder; NoArtifacts when it holds no JUnit file and no result.json."""
    if not artifacts.is_dir():
        raise NoArtifacts(f"{artifacts} is not a folder: expected a run's artifacts folder ($ARTIFACTS)")
    junit_files = sorted(p for p in artifacts.glob("junit_*.xml") if p.name != RUNNER_JUNIT)
    result_paths = _result_paths(artifacts)
    if not junit_files and not result_paths:
        raise NoArtifacts(f"{artifacts} holds no junit_*.xml and no <binary>/**/result.json: "
                          "expected a run's artifacts folder ($ARTIFACTS)")
    results = [read_result(path, binary) for binary, path in result_paths]
    cases: list[tuple[JUnitCase, str]] = []
    suite_properties: dict[str, str] = {}
    for path in junit_files:
        try:
            file_cases, properties = read_junit(path)
        except (OSError, ET.ParseError) as err:
            results.append(TestResult(path.stem.removeprefix("junit_"), path.name, "ERROR", artifacts, path.name,
                                      message=f"JUnit file unreadable: {err}", problems=[f"{path}: {err}"]))
            continue
        cases.extend((case, path.name) for case in file_cases)
        suite_properties.update(properties)
    return Run(artifacts, _merge(results, cases, artifacts), junit_files, config_from_properties(suite_properties),
               _metadata(artifacts))
