"""JUnit XML for Prow/TestGrid ($ARTIFACTS/junit_<binary>.xml); `python -m harness.report.junit FILE` summarizes one.

Built with junit-xml, then per-testcase <properties> (config and metrics) are added to its tree.
Every string goes through `xml_safe` first, so the file is well-formed whatever bytes the logs held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from harness.config.artifacts import write_atomically
from harness.verdict.checks import EMULATED

# junit_xml and ElementTree are imported where they are used, like yaml (harness/cluster/manifests.py):
# `--help` and `--test.list` write no JUnit.

# XML 1.0 allows tab, LF, CR and these ranges; everything else (NUL, other C0 controls, lone
# surrogates, U+FFFE/FFFF) makes the file unparseable.
_ILLEGAL_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# kubetest2 writes junit_runner.xml itself; a tester must never write that name.
RESERVED_JUNIT = "junit_runner.xml"


def xml_safe(text: str | bytes) -> str:
    """Text fit for an XML document: invalid UTF-8 replaced, ANSI escapes and illegal chars removed."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not _ILLEGAL_XML.search(text):
        # Nothing to change (an escape starts with ESC, itself illegal): 8,000 ranks' properties
        # are 240,000 short values, and cleaning each took half of writing the JUnit.
        return text
    text = text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
    return _ILLEGAL_XML.sub("\ufffd", _ANSI_ESCAPE.sub("", text))


class Outcome(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    ERROR = "ERROR"  # a harness or infrastructure error: reported as <error>


@dataclass
class CaseResult:
    """One test's or subtest's result, as the runner recorded it."""

    name: str
    outcome: Outcome = Outcome.PASS
    elapsed: float = 0.0
    message: str = ""
    detail: str = ""  # body of <failure>/<error>: the reason, the failing pod's last lines
    system_out: str = ""
    properties: dict[str, str] = field(default_factory=dict)


def write_junit(path: Path, suite_name: str, results: list[CaseResult],
                suite_properties: dict[str, str]) -> None:
    """Write `<testsuites><testsuite name=suite_name>` atomically (never a half-written file)."""
    import xml.etree.ElementTree as ET

    from junit_xml import TestCase, TestSuite

    if path.name == RESERVED_JUNIT:
        raise ValueError(f"write junit: {RESERVED_JUNIT} belongs to kubetest2")
    cases = []
    for result in results:
        case = TestCase(name=xml_safe(result.name), classname=suite_name, elapsed_sec=result.elapsed,
                        stdout=xml_safe(result.system_out) or None)
        message, detail = xml_safe(result.message), xml_safe(result.detail)
        if result.outcome is Outcome.FAIL:
            case.add_failure_info(message=message, output=detail or message)
        elif result.outcome is Outcome.ERROR:
            case.add_error_info(message=message, output=detail or message)
        elif result.outcome is Outcome.SKIP:
            case.add_skipped_info(message=message)
        cases.append(case)
    suite = TestSuite(suite_name, cases,
                      properties={xml_safe(k): xml_safe(v) for k, v in suite_properties.items()})
    suite_element = suite.build_xml_doc()
    for element, result in zip(suite_element.findall("testcase"), results, strict=True):
        if result.properties:
            props = ET.Element("properties")
            for key, value in result.properties.items():
                ET.SubElement(props, "property", name=xml_safe(key), value=xml_safe(str(value)))
            element.insert(0, props)
    root = ET.Element("testsuites")
    root.append(suite_element)
    ET.indent(root)
    write_atomically(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))


# Metrics shown in the end-of-run summary, when a test reported them.
SUMMARY_METRICS = ("throughput", "tokens_per_s", "samples_per_s", "busbw_avg", "mfu", "loss_last", "accuracy")


def summarize(path: Path) -> str:
    """A short human summary of a JUnit file: each test's verdict, time, key metrics, reason."""
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    lines = []
    for suite in root.iter("testsuite"):
        lines.append(f"{suite.get('name')}: {suite.get('tests')} tests, {suite.get('failures')} failed, "
                     f"{suite.get('errors')} errors, {suite.get('skipped')} skipped")
        for case in suite.iter("testcase"):
            verdict = "PASS"
            reason = ""
            for tag in ("failure", "error", "skipped"):
                element = case.find(tag)
                if element is not None:
                    verdict = {"failure": "FAIL", "error": "ERROR", "skipped": "SKIP"}[tag]
                    reason = (element.get("message") or "").splitlines()[0] if element.get("message") else ""
            props = {p.get("name"): p.get("value") for p in case.iter("property")}
            shown = [f"{key} {props[f'metrics.{key}.median']} (median of {props.get(f'metrics.{key}.count')})"
                     for key in SUMMARY_METRICS if f"metrics.{key}.median" in props]
            # Canned results (the local cluster served the logs) must not read like real ones.
            execution = props.get("execution")
            marker = f" [execution={execution}]" if execution in ("canned", "mixed") else ""
            # So are checks judged on the local cluster's emulated node capacity (Check.execution).
            emulated = [key.removeprefix("check.").removesuffix(".execution") for key, value in props.items()
                        if key.startswith("check.") and key.endswith(".execution") and value == EMULATED]
            marker += f" [emulated capacity: {', '.join(emulated)}]" if emulated else ""
            lines.append(f"  {verdict:<5} {case.get('name')} ({float(case.get('time') or 0):.1f}s){marker}"
                         + (f": {'; '.join(shown)}" if shown else "") + (f" - {reason}" if reason else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(summarize(Path(arg)))
