"""The runner in-process, on tests that need no cluster: exit codes, JUnit on every path, and a
JUnit that cannot be written at the end failing the run."""

from __future__ import annotations

import shutil

import junitparser
import pytest

from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.framework.suite import Suite
from harness.metrics.records import combine, scan_lines
from harness.runner import EXIT_FAIL, EXIT_PASS, main

pytestmark = pytest.mark.usefixtures("keep_signal_handlers")


def passes(t: TestContext) -> None:
    t.property("answer", 42)


def fails(_t: TestContext) -> None:
    raise TestFailure("the cluster misbehaved")


def reads_a_log_without_metrics(_t: TestContext) -> None:
    combine([scan_lines(["epoch 1 done", "bye"], "bert-training-0")])


def loses_the_artifacts_folder(t: TestContext) -> None:
    """What a full disk or a cleanup gone wrong does: the folder is gone, a file in its place."""
    shutil.rmtree(t.session.artifacts)
    t.session.artifacts.write_text("not a folder any more")


def suite_of(*funcs) -> Suite:
    suite = Suite("unit-suite", "in-process tests")
    for func in funcs:
        suite.test(f"Test{func.__name__.title()}", needs_cluster=False)(func)
    return suite


def run(suite: Suite, tmp_path, monkeypatch, *args: str) -> int:
    monkeypatch.setenv("ARTIFACTS", str(tmp_path / "artifacts"))
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    return main(suite, ["--test.v", *args])


def test_a_passing_run_exits_0_with_junit_and_the_resolved_configuration(tmp_path, monkeypatch, capsys):
    assert run(suite_of(passes), tmp_path, monkeypatch) == EXIT_PASS
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "artifacts" / "junit_unit-suite.xml"))
    suite = next(iter(xml))
    props = {p.name: p.value for p in suite.properties()}
    assert props["config.launcher"] == "torchrun" and props["config.launcher.source"] == "default: default"
    assert props["config.artifacts.source"] == "env: ARTIFACTS"
    assert "config.node_count" in props  # left to discovery; <unset> without a cluster


def test_a_failing_test_exits_1(tmp_path, monkeypatch, capsys):
    assert run(suite_of(passes, fails), tmp_path, monkeypatch) == EXIT_FAIL
    assert capsys.readouterr().out.splitlines()[-1] == "FAIL"


def test_a_junit_that_cannot_be_written_at_the_end_fails_the_run(tmp_path, monkeypatch, capsys):
    code = run(suite_of(passes, loses_the_artifacts_folder), tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    assert code == EXIT_FAIL
    assert out.splitlines()[-1] == "FAIL"
    assert "--- PASS: TestLoses_The_Artifacts_Folder" in out  # every test passed ...
    assert f"cannot write JUnit to {tmp_path / 'artifacts'}" in err  # ... but the report is lost


def test_two_tests_of_one_name_are_refused():
    suite = suite_of(passes)
    with pytest.raises(ValueError, match="two tests named TestPasses"):
        suite.test("TestPasses")(fails)


def test_a_log_without_metrics_is_a_named_error_not_a_traceback(tmp_path, monkeypatch):
    assert run(suite_of(reads_a_log_without_metrics), tmp_path, monkeypatch) == EXIT_FAIL
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "artifacts" / "junit_unit-suite.xml"))
    (case,) = [c for suite in xml for c in suite]
    (error,) = case.result
    assert isinstance(error, junitparser.Error)
    assert error.message == "UnrecognisedLog: parse metrics: no known metric format in bert-training-0"
    assert "Traceback" not in (error.text or "")


def report_text(tmp_path) -> str:
    return (tmp_path / "artifacts" / "report.html").read_text()


def test_every_run_leaves_a_report_beside_its_junit(tmp_path, monkeypatch, capsys):
    assert run(suite_of(passes, fails), tmp_path, monkeypatch) == EXIT_FAIL
    page = report_text(tmp_path)
    assert "TestPasses" in page and "TestFails" in page
    assert "the cluster misbehaved" in page  # the failing check's message, as the JUnit says it


def test_a_configuration_error_leaves_a_report_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NODE_COUNT", "abc")
    assert run(suite_of(passes), tmp_path, monkeypatch) == 2
    assert "NODE_COUNT" in report_text(tmp_path)


def test_a_report_that_cannot_be_written_leaves_the_verdict_and_says_why(tmp_path, monkeypatch, capsys):
    def broken(_artifacts):
        raise RuntimeError("the page broke")

    monkeypatch.setattr("harness.report.page.write_report", broken)
    assert run(suite_of(passes), tmp_path, monkeypatch) == EXIT_PASS
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "PASS"
    assert "unit-suite: warning: report.html not written: RuntimeError: the page broke" in err
    assert (tmp_path / "artifacts" / "junit_unit-suite.xml").exists()
