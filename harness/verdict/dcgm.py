"""DCGM diagnostics (`dcgmi diag -r <level> -j`, TestDcgmDiagnostics): each node's JSON report read
into per-test, per-GPU results, and judged.

dcgmi's JSON (DCGM 3 and 4) is `{"DCGM GPU Diagnostic": {"test_categories": [{"category": ...,
"tests": [{"name": ..., "results": [{"gpu_ids": "0" | "0,1,...", "status": "Pass", "warnings":
[...], "info": [...]}]}]}], "version": ...}}`; the status is spelled PASS/Pass, FAIL/Fail, WARN/Warn,
SKIP/SKIPPED/Skip or "Not Run" depending on the version, and a warning is a string or an object
with `warning` and `error_id`. Per-GPU tests (everything but the software/deployment checks) carry
one result per GPU.

A node passes when its report parsed, no result failed, at least one test passed (DCGM that skipped
everything established nothing), dcgmi exited 0, and the per-GPU tests cover every GPU the node
should have. Warnings are recorded, not failed: DCGM's own verdict treats them as passes. upstream
judges dcgmi's exit status alone: the rest decides where dcgmi exited 0 only with JUDGE_STRICT.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.verdict.checks import Verdict, beyond_upstream, declare

DCGM = declare("dcgm.<node>", "dcgmi exited non-zero on the node (upstream's verdict), or a DCGM test failed there, "
               "none passed, or the per-GPU tests missed a GPU: where dcgmi exited 0, informational unless "
               "JUDGE_STRICT", "DCGM's own verdicts", settings=("DCGM_DIAG_LEVEL", "JUDGE_STRICT"))

REPORT_KEY = "DCGM GPU Diagnostic"
# The line the test's script prints after dcgmi (its exit status): the pod itself exits 0 so that
# the report of a failing diagnostic is read rather than replaced by "the pod failed".
EXIT_PREFIX = "dcgmi exit status: "
PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUS_WORDS = {"pass": PASS, "fail": FAIL, "warn": WARN, "warning": WARN, "skip": SKIP, "skipped": SKIP,
                "not run": SKIP}


@dataclass(frozen=True)
class DiagResult:
    """One result line of the report: a test on some GPUs (all of them for the software tests)."""

    category: str
    test: str
    gpus: tuple[str, ...]
    status: str  # PASS, FAIL, WARN or SKIP
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class NodeReport:
    """What one node's pod printed: dcgmi's results, its exit status, or why neither could be read."""

    node: str
    results: tuple[DiagResult, ...]
    exit_status: int | None
    version: str = ""
    problem: str = ""  # the report could not be read: why

    def with_status(self, status: str) -> list[DiagResult]:
        return [r for r in self.results if r.status == status]


def _warning_text(warning: Any) -> str:
    if isinstance(warning, Mapping):
        code = f" (error {warning['error_id']})" if "error_id" in warning else ""
        return f"{warning.get('warning', '')}{code}".strip()
    return str(warning)


def parse_report(node: str, lines: Iterable[str]) -> NodeReport:
    """A node's pod log: the JSON object dcgmi printed (wherever it starts: canned headers and
    dcgmi's own warnings may come before it) and the exit status line after it."""
    text_lines = list(lines)
    exit_status = next((int(line[len(EXIT_PREFIX):].strip()) for line in text_lines
                        if line.startswith(EXIT_PREFIX) and line[len(EXIT_PREFIX):].strip().lstrip("-").isdigit()),
                       None)
    text = "\n".join(line for line in text_lines if not line.startswith(EXIT_PREFIX))
    start = text.find("{")
    if start < 0:
        return NodeReport(node, (), exit_status, problem="no JSON report in the log (did dcgmi run?)")
    try:
        document, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        return NodeReport(node, (), exit_status, problem=f"the JSON report does not parse: {exc}")
    report = document.get(REPORT_KEY) if isinstance(document, dict) else None
    if not isinstance(report, dict):
        return NodeReport(node, (), exit_status, problem=f"the JSON report has no {REPORT_KEY!r} object")
    results = []
    for category in report.get("test_categories") or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3 writes null between tests
            for result in test.get("results") or []:
                raw = str(result.get("status", "")).strip().lower()
                gpus = tuple(g.strip() for g in str(result.get("gpu_ids", result.get("gpu_id", ""))).split(",")
                             if g.strip())
                results.append(DiagResult(str(category.get("category", "?")), str(test.get("name", "?")), gpus,
                                          STATUS_WORDS.get(raw, FAIL if raw else SKIP),
                                          tuple(_warning_text(w) for w in result.get("warnings") or [])))
    return NodeReport(node, tuple(results), exit_status, str(report.get("version", "")))


def _describe(result: DiagResult) -> str:
    where = f"GPU {','.join(result.gpus)}" if result.gpus else "all GPUs"
    why = f": {'; '.join(result.warnings)}" if result.warnings else ""
    return f"{result.category}/{result.test} on {where}{why}"


def node_problem(report: NodeReport, gpus_per_node: int) -> str | None:
    """Why the node fails, or None."""
    if report.problem:
        return report.problem + (f" (dcgmi exit status {report.exit_status})" if report.exit_status else "")
    failed = report.with_status(FAIL)
    if failed:
        return "failed " + "; ".join(_describe(r) for r in failed)
    if report.exit_status:
        return f"dcgmi exited {report.exit_status} with no failed test in its report"
    if not report.with_status(PASS):
        skipped = report.with_status(SKIP)
        return f"no test passed ({len(skipped)} skipped: DCGM established nothing)" + (
            f": {_describe(skipped[0])}" if skipped else "")
    per_gpu = {g for r in report.results if r.category.lower() not in ("deployment", "software") for g in r.gpus}
    if per_gpu and len(per_gpu) < gpus_per_node:
        return f"DCGM tested {len(per_gpu)} GPU(s) ({','.join(sorted(per_gpu))}), the node should have {gpus_per_node}"
    return None


def judge_dcgm(reports: Iterable[NodeReport], nodes: Iterable[str], gpus_per_node: int, level: str, *,
               test: str = "", strict: bool = True) -> Verdict:
    """One check per node of `nodes` (`dcgm.<node>`), failing with what failed on which GPU; a node
    whose pod left no log fails too. upstream's verdict is dcgmi's exit status: a node whose dcgmi
    exited 0 and still fails here (a failed test, none passed, a GPU missed) is beyond upstream's
    `test`, informational unless `strict`."""
    by_node = {r.node: r for r in reports}
    checks = []
    for node in nodes:
        report = by_node.get(node) or NodeReport(node, (), None, problem="no log of its pod was captured")
        problem = node_problem(report, gpus_per_node)
        if problem:
            failed = DCGM.failed(f"dcgm-diag level {level} on node {report.node}: {problem}", part=report.node)
            checks.extend([failed] if report.exit_status != 0 else beyond_upstream([failed], test, strict))
            continue
        counts = {s: len(report.with_status(s)) for s in (PASS, WARN, SKIP)}
        warned = report.with_status(WARN)
        note = f"; warnings: {'; '.join(_describe(r) for r in warned)}" if warned else ""
        checks.append(DCGM.passed(f"dcgm-diag level {level} on node {report.node}: {counts[PASS]} passed, "
                                  f"{counts[WARN]} warned, {counts[SKIP]} skipped (DCGM {report.version or '?'})"
                                  + note, part=report.node))
    if not checks:
        checks.append(DCGM.failed("dcgm-diag: no node to judge"))
    return Verdict(checks)
