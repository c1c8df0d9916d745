"""TestDcgmDiagnostics' judgement (harness/verdict/dcgm.py) on dcgmi's JSON report: the canned logs the
local cluster serves, and the report's variants across DCGM versions."""

from __future__ import annotations

import json
from pathlib import Path

from harness.verdict.checks import Status
from harness.verdict.dcgm import FAIL, PASS, SKIP, judge_dcgm, parse_report

CANNED = Path(__file__).resolve().parents[4] / "localcluster" / "emulation" / "canned_logs"


def report(node: str, results: list[dict], exit_status: int = 0, prefix: str = "") -> list[str]:
    doc = {"DCGM GPU Diagnostic": {"version": "3.3.9", "test_categories": [
        {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]},
                                             None]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": results}]}]}}
    return [*prefix.splitlines(), *json.dumps(doc, indent=2).splitlines(), f"dcgmi exit status: {exit_status}"]


def verdict_of(lines: list[str], gpus: int = 2):
    return judge_dcgm([parse_report("node-a", lines)], ["node-a"], gpus, "3")


def test_the_canned_healthy_node_passes_with_every_gpu_tested():
    parsed = parse_report("n", (CANNED / "nvidia-suite" / "dcgm-diag.log").read_text().splitlines())
    assert parsed.exit_status == 0 and parsed.version == "4.2.3" and not parsed.problem
    assert {r.status for r in parsed.results} == {PASS}
    [check] = judge_dcgm([parsed], ["n"], 8, "3").checks
    assert check.status is Status.PASS, check.message
    assert "passed, 0 warned, 0 skipped (DCGM 4.2.3)" in check.message


def test_the_canned_failing_gpu_is_named_with_its_test_and_dcgms_words():
    lines = (CANNED / "dcgm-diag-gpu3-fails.log").read_text().splitlines()
    [check] = judge_dcgm([parse_report("p5-1", lines)], ["p5-1"], 8, "3").checks
    assert check.status is Status.FAIL
    assert check.message == ("dcgm-diag level 3 on node p5-1: failed Hardware/GPU Memory on GPU 3: GPU 3 had "
                             "uncorrectable memory errors and row remapping failed.")


def test_dcgm3_spelling_null_tests_and_warning_objects_are_read():
    lines = report("node-a", [{"gpu_ids": "0", "status": "PASS"},
                              {"gpu_ids": "1", "status": "FAIL",
                               "warnings": [{"warning": "memory test failed", "error_id": 83}]}],
                   exit_status=1, prefix="Warning: something dcgmi printed first")
    [check] = verdict_of(lines).checks
    assert check.message.endswith("failed Hardware/GPU Memory on GPU 1: memory test failed (error 83)")


def test_warnings_pass_and_are_said():
    lines = report("node-a", [{"gpu_ids": "0", "status": "Pass"},
                              {"gpu_ids": "1", "status": "Warn", "warnings": ["clocks throttled"]}])
    [check] = verdict_of(lines).checks
    assert check.status is Status.PASS
    assert "1 warned" in check.message and "GPU 1: clocks throttled" in check.message


def test_a_diagnostic_that_skipped_everything_established_nothing():
    lines = report("node-a", [{"gpu_ids": "0", "status": "SKIPPED"}, {"gpu_ids": "1", "status": "Not Run"}])
    lines = [line.replace('"PASS"', '"SKIP"') for line in lines]
    parsed = parse_report("node-a", lines)
    assert {r.status for r in parsed.results} == {SKIP}
    [check] = verdict_of(lines).checks
    assert check.status is Status.FAIL and "no test passed (3 skipped" in check.message


def test_fewer_gpus_tested_than_the_node_has_fails():
    lines = report("node-a", [{"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Pass"}])
    [check] = verdict_of(lines, gpus=8).checks
    assert check.status is Status.FAIL
    assert "DCGM tested 2 GPU(s) (0,1), the node should have 8" in check.message


def test_a_nonzero_exit_without_a_failed_test_fails():
    lines = report("node-a", [{"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Pass"}], exit_status=2)
    [check] = verdict_of(lines).checks
    assert check.status is Status.FAIL and "dcgmi exited 2 with no failed test" in check.message


def test_no_report_and_a_missing_node_fail_naming_why():
    no_json = parse_report("node-a", ["dcgmi: error while loading shared libraries", "dcgmi exit status: 127"])
    assert no_json.problem.startswith("no JSON report")
    verdict = judge_dcgm([no_json], ["node-a", "node-b"], 8, "1")
    assert [c.status for c in verdict.checks] == [Status.FAIL, Status.FAIL]
    assert "no JSON report in the log (did dcgmi run?) (dcgmi exit status 127)" in verdict.checks[0].message
    assert verdict.checks[1].message == "dcgm-diag level 1 on node node-b: no log of its pod was captured"


def test_an_unknown_status_word_counts_as_a_failure():
    lines = report("node-a", [{"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Exploded"}])
    assert [r.status for r in parse_report("node-a", lines).results][-1] == FAIL


def test_where_dcgmi_exited_0_the_reports_own_failures_decide_only_when_strict():
    """upstream's verdict is dcgmi's exit status: a node whose dcgmi exited 0 but whose report covers
    fewer GPUs than it has is beyond upstream, informational unless JUDGE_STRICT; one that exited 1
    fails either way."""
    missed_gpu = report("node-a", [{"gpu_ids": "0", "status": "Pass"}], exit_status=0)
    lenient = judge_dcgm([parse_report("node-a", missed_gpu)], ["node-a"], 2, "3", test="TestDcgmDiagnostics",
                         strict=False)
    [check] = lenient.checks
    assert check.status is Status.INFORMATIONAL and lenient.passed
    assert check.message.startswith("upstream's TestDcgmDiagnostics does not judge this (JUDGE_STRICT=true")
    assert "it would fail: dcgm-diag level 3 on node node-a: DCGM tested 1 GPU(s) (0), the node should have 2" in (
        check.message)
    assert judge_dcgm([parse_report("node-a", missed_gpu)], ["node-a"], 2, "3", strict=True).checks[0].status is (
        Status.FAIL)
    failing = report("node-a", [{"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "FAIL"}], exit_status=1)
    assert judge_dcgm([parse_report("node-a", failing)], ["node-a"], 2, "3", strict=False).checks[0].status is (
        Status.FAIL)
