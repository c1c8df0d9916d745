"""result.json (docs/ARTIFACTS.md) on every exit path, read back as the HTML report reads it; the
test folder naming rule; execution=canned|real in JUnit and on the console."""

from __future__ import annotations

import json
import stat
from pathlib import Path, PurePosixPath

import junitparser
import pytest

from harness.cluster.logs import CapturedLog
from harness.config.artifacts import folder_of_test
from harness.config.settings import Origin, Source
from harness.config.topology import NodeInfo, Topology
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.framework.suite import Suite
from harness.jobs.assessment import record_verdict
from harness.metrics.records import combine, scan_lines
from harness.report.html import checks_section, summary_table
from harness.report.inputs import read_result
from harness.report.junit import summarize
from harness.report.results import MAX_STEPS_PER_RANK, MetricsMeta
from harness.runner import EXIT_FAIL, EXIT_PASS, main
from harness.verdict.capacity import judge_advertised
from harness.verdict.checks import Check, Verdict
from harness.verdict.nodes import check_nodes

from ...crafted_logs import metrics_line, metrics_record, step_lines

pytestmark = pytest.mark.usefixtures("keep_signal_handlers")


def pod(name: str, node: str, canned: bool, exit_code: int = 0) -> dict:
    annotations = {"kubetest2-training.local/canned-log": "x"} if canned else {
        "kubetest2-training.local/executed-by": "node-agent"}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"nodeName": node},
            "status": {"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [
                {"name": "worker", "restartCount": 0,
                 "state": {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}}}]}}


def trains(t: TestContext, canned: bool = False, fail: bool = False) -> None:
    """What a training test leaves: pods with logs, events, metrics and a verdict."""
    logs = t.artifacts_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    text = "\n".join([*step_lines(0, 1500), metrics_line(metrics_record(0, 1))]) + "\n"
    (logs / "worker-0.log").write_text(text)
    captured = [CapturedLog("worker-0", "node-0", "worker", logs / "worker-0.log")]
    t.result_json.add_pods([pod("worker-0", "node-0", canned, 134 if fail else 0)], captured, t.artifacts_dir)
    t.result_json.events = [{"time": "2026-12-01T10:00:00Z", "type": "Normal", "object": "Pod/worker-0",
                        "reason": "Scheduled", "message": "assigned"}]
    metrics = combine([scan_lines(text.splitlines(), "logs/worker-0.log")])
    verdict = Verdict([Check.passed("ranks", "all 1 ranks reported once")])
    if fail:
        verdict.add(Check.failed("loss", "metrics: loss did not decrease on rank 0"))
    verdict.references["probe_matmul_tflops"] = {"reference": 250.0, "threshold": 175.0, "how": "upper quartile"}
    record_verdict(t, verdict, metrics, MetricsMeta(1, "throughput", "samples/s"))


def passes(t: TestContext) -> None:
    trains(t)


def fails(t: TestContext) -> None:
    trains(t, fail=True)


def canned(t: TestContext) -> None:
    trains(t, canned=True)


def errors(_t: TestContext) -> None:
    raise RuntimeError("the harness broke")


def skips(t: TestContext) -> None:
    t.skip("needs GPUs")


def has_upstream_subtests(t: TestContext) -> None:
    t.run("multi-node:all_reduce_perf", lambda sub: trains(sub, canned=True))
    t.run("single-node", trains)


def run_suite(tmp_path: Path, monkeypatch, *funcs, args: tuple[str, ...] = ()) -> int:
    suite = Suite("unit-suite", "in-process tests")
    for func in funcs:
        suite.test(f"Test{func.__name__.title().replace('_', '')}", needs_cluster=False)(func)
    monkeypatch.setenv("ARTIFACTS", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    return main(suite, ["--test.v", *args])


def result_of(tmp_path: Path, test: str) -> dict:
    path = tmp_path / "unit-suite" / folder_of_test(test) / "result.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    return json.loads(path.read_text())


def test_a_passing_test_writes_everything_the_report_reads(tmp_path, monkeypatch):
    assert run_suite(tmp_path, monkeypatch, passes) == EXIT_PASS
    result = result_of(tmp_path, "TestPasses")
    assert (result["schema"], result["binary"], result["test"], result["outcome"]) == (1, "unit-suite", "TestPasses",
                                                                                      "PASS")
    assert result["started"].endswith("Z") and result["elapsed_s"] >= 0 and "failed_at" not in result
    assert result["execution"] == "real" and result["config"]["launcher"]["source"] == "default"
    assert result["checks"] == [{"name": "ranks", "status": "pass", "message": "all 1 ranks reported once"}]
    metrics = result["metrics"]
    assert metrics["probe"] == {"key": "probe_matmul_tflops", "unit": "TFLOP/s"}
    assert metrics["throughput"] == {"key": "throughput", "unit": "samples/s"} and metrics["world_size"] == 1
    (rank,) = metrics["ranks"]
    assert (rank["pod"], rank["node"]) == ("bert-worker-0", "node-0")
    assert len(rank["steps"]) == MAX_STEPS_PER_RANK and rank["steps"][0][0] == 0 and rank["steps"][-1][0] == 1499
    assert metrics["references"]["probe_matmul_tflops"]["threshold"] == 175.0
    (worker,) = result["pods"]
    assert worker["logs"] == ["logs/worker-0.log"] and worker["execution"] == "real"
    assert worker["containers"] == [{"name": "worker", "exit_code": 0, "reason": "Completed", "restarts": 0,
                                     "signal": None}]
    assert result["events"][0]["reason"] == "Scheduled"
    report = read_result(tmp_path / "unit-suite" / "TestPasses" / "result.json", "unit-suite")
    assert report.problems == [] and report.metrics.probe_key == "probe_matmul_tflops"
    assert (tmp_path / "unit-suite" / "TestPasses" / report.pods[0].logs[0]).is_file()


def test_a_failing_test_has_failed_at_the_message_of_junit_and_the_signal(tmp_path, monkeypatch):
    assert run_suite(tmp_path, monkeypatch, fails) == EXIT_FAIL
    result = result_of(tmp_path, "TestFails")
    assert result["outcome"] == "FAIL" and result["failed_at"] >= result["started"]
    assert result["message"] == "metrics: loss did not decrease on rank 0"
    assert result["pods"][0]["containers"][0]["signal"] == 6  # exit code 134 = 128 + SIGABRT
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "junit_unit-suite.xml"))
    (case,) = [c for suite in xml for c in suite]
    assert case.result[0].message == result["message"] and case.name == result["test"]
    props = {p.get("name"): p.get("value") for p in case._elem.iter("property")}
    assert props["check.loss"] == "fail: metrics: loss did not decrease on rank 0"
    assert props["checks.ran"] == "ranks,loss" and props["execution"] == "real"


@pytest.mark.parametrize(("func", "outcome", "message"), [
    (errors, "ERROR", "RuntimeError: the harness broke"), (skips, "SKIP", "needs GPUs")])
def test_errors_and_skips_write_result_json_too(tmp_path, monkeypatch, func, outcome, message):
    run_suite(tmp_path, monkeypatch, func)
    result = result_of(tmp_path, f"Test{func.__name__.title()}")
    assert (result["outcome"], result["message"], result["execution"]) == (outcome, message, "none")
    assert result["started"] and result["elapsed_s"] >= 0 and result["metrics"] is None
    assert ("failed_at" in result) == (outcome == "ERROR")


def test_tests_not_run_after_failfast_write_result_json(tmp_path, monkeypatch):
    assert run_suite(tmp_path, monkeypatch, fails, passes, args=("--test.failfast",)) == EXIT_FAIL
    result = result_of(tmp_path, "TestPasses")
    assert result["outcome"] == "SKIP" and result["message"].startswith("not run: -test.failfast")


def test_subtests_folders_follow_the_rule_and_the_parent_sums_up_execution(tmp_path, monkeypatch, capsys):
    assert run_suite(tmp_path, monkeypatch, has_upstream_subtests) == EXIT_PASS
    sub = result_of(tmp_path, "TestHasUpstreamSubtests/multi-node:all_reduce_perf")
    assert sub["test"] == "TestHasUpstreamSubtests/multi-node:all_reduce_perf" and sub["execution"] == "canned"
    folder = tmp_path / "unit-suite" / "TestHasUpstreamSubtests" / "multi-node_all_reduce_perf"
    assert (folder / "result.json").is_file()
    assert result_of(tmp_path, "TestHasUpstreamSubtests")["execution"] == "mixed"
    out = capsys.readouterr().out
    assert "--- PASS: TestHasUpstreamSubtests/multi-node:all_reduce_perf" in out
    assert "execution=canned: the local cluster served canned pod logs, not a real run" in out
    assert "execution=mixed" in out


def test_the_junit_summary_says_canned(tmp_path, monkeypatch):
    run_suite(tmp_path, monkeypatch, canned, passes)
    summary = summarize(tmp_path / "junit_unit-suite.xml")
    assert "PASS  TestCanned" in summary and "[execution=canned]" in summary
    assert "[execution=" not in next(line for line in summary.splitlines() if "TestPasses" in line)


@pytest.mark.parametrize(("name", "folder"), [
    ("TestBertTraining", "TestBertTraining"),
    ("TestMPIJobPytorchTraining/multi-node:all_gather_perf", "TestMPIJobPytorchTraining/multi-node_all_gather_perf"),
    ("TestX/..", "TestX/_.."),
    ("TestX/", "TestX/_"),
    ("TestX/a b\u00e9", "TestX/a_b_"),
])
def test_the_folder_rule(name, folder):
    assert folder_of_test(name) == PurePosixPath(folder)


def on_kwok_nodes(t: TestContext) -> None:
    """Checks on the capacity of two kwok p5 nodes (one short of GPUs) and one on metrics."""
    nodes = tuple(NodeInfo(f"kwok-p5-{i}", "p5.48xlarge", gpus, 32, True, emulated=True)
                  for i, gpus in enumerate((8, 7)))
    found = Origin(Source.DISCOVERED, "the nodes")
    origins = dict.fromkeys(("node_type", "node_count", "gpus_per_node", "efa_per_node"), found)
    t.session.topology = Topology("p5.48xlarge", nodes, 8, 32, origins, tuple((n.name, ()) for n in nodes),
                                  tuple(n.name for n in nodes))
    verdict = judge_advertised(t.topology)
    verdict.checks[:0] = [check_nodes(t.topology)]
    verdict.add(Check.passed("loss", "loss decreased"))
    record_verdict(t, verdict)


def test_checks_on_emulated_node_capacity_say_so_in_result_junit_log_and_report(tmp_path, monkeypatch, capsys):
    """Issue 34 item 4: a check judged on the local cluster's kwok nodes' capacity carries execution
    `emulated` (result.json, JUnit, its message in the log and the failure) and the report shows it;
    a check on other data does not. Before, nothing told these from checks of real devices."""
    assert run_suite(tmp_path, monkeypatch, on_kwok_nodes) == EXIT_FAIL
    result = result_of(tmp_path, "TestOnKwokNodes")
    executions = {check["name"]: check.get("execution") for check in result["checks"]}
    assert executions == {"nodes": "emulated", "capacity.gpus": "emulated", "capacity.efa": "emulated",
                          "loss": None}
    gpus = next(check for check in result["checks"] if check["name"] == "capacity.gpus")
    assert gpus["message"].endswith("[emulated: capacity of kwok node(s) kwok-p5-0, kwok-p5-1, written by whoever "
                                    "made them, not counted by a device plugin]"), gpus["message"]
    assert result["message"] == gpus["message"]  # the failure says it too
    out = capsys.readouterr().out
    assert "FAIL           capacity.gpus: capacity: node kwok-p5-1 has 7 allocatable" in out
    assert "[emulated: capacity of kwok node(s)" in out
    summary = summarize(tmp_path / "junit_unit-suite.xml")
    assert "[emulated capacity: nodes, capacity.gpus, capacity.efa]" in summary, summary
    report = read_result(tmp_path / "unit-suite" / "TestOnKwokNodes" / "result.json", "unit-suite")
    shown = checks_section(report.checks)
    assert shown.count('<span class="badge emulated"') == 3, shown
    assert '<span class="badge emulated"' in summary_table([report], {0: "t"})


def test_a_verdict_raises_only_after_it_is_recorded(tmp_path, monkeypatch):
    def records_then_fails(t: TestContext) -> None:
        with pytest.raises(TestFailure):
            record_verdict(t, Verdict([Check.failed("loss", "boom")]))
        assert t.junit_case.properties["check.loss"] == "fail: boom"

    assert run_suite(tmp_path, monkeypatch, records_then_fails) == EXIT_PASS


def test_a_pod_a_real_kubelet_ran_is_a_container_run_and_only_the_node_agents_are_host_processes():
    """execution: `real` is the local cluster's node agent (host process), `container` a real kubelet
    (the local cluster's real nodes, any real cluster), `canned` a served log."""
    from harness.cluster.pods import execution_of
    from harness.report.results import combined_execution

    kubelet_pod = {"metadata": {"name": "w", "annotations": {"other.example/x": "y"}}, "spec": {"nodeName": "n"}}
    assert execution_of(kubelet_pod) == "container"
    assert execution_of({"metadata": {"name": "w"}}) == "container"
    assert execution_of(pod("w", "n", canned=False)) == "real"
    assert execution_of(pod("w", "n", canned=True)) == "canned"
    # A canned-log annotation the node agent ran anyway (a container without one) is still a real run.
    both = {"metadata": {"annotations": {"kubetest2-training.local/canned-log-sidecar": "x",
                                         "kubetest2-training.local/executed-by": "node-agent"}}}
    assert execution_of(both) == "real"
    assert combined_execution(["container", "container"]) == "container"
    assert combined_execution(["container", "real"]) == "mixed"
