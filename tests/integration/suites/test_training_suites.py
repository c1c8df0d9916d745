"""The training suites through the real kubetest2, with pods that really train (CPU, gloo).

What the README's main command runs, judged from the artifacts alone (the JUnit file, the logs,
manifests and events on disk), as a CI user would: `ACCELERATOR=cpu WORKLOAD_SIZE=tiny` on the
local cluster's 2 CPU nodes, one process per node, so every test's world size is 2.
Each suite runs once; the tests below read its artifacts. The training suite runs as the
least-privilege ServiceAccount, once per session: test_reliability.py judges the same run for RBAC.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser.chromium import Chromium
from report_in_browser import check_run_page

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import (
    TRAINING_SUITE,
    SuiteRun,
    assert_judged_as_declared,
    assert_runner_junit_intact,
    case_properties,
    kubetest2,
    run_as_service_account,
    suite_properties,
)

pytestmark = pytest.mark.integration

WORLD_SIZE = 2  # 2 CPU nodes x 1 process
TRAINING_TESTS = {  # test -> its throughput key in the workload's metrics
    "TestBertTraining": "throughput",
    "TestNanoGPTTraining": "tokens_per_s",
    "TestMNISTTraining": "samples_per_s",
    "TestElasticRecovery": "tokens_per_s",
}


@pytest.fixture(scope="module")
def training(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    return run_as_service_account(cluster, tmp_path_factory, TRAINING_SUITE)


@pytest.fixture(scope="module")
def allreduce(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    ensure_default_nodes(cluster)
    artifacts = tmp_path_factory.mktemp("allreduce") / "artifacts"
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia", "--test.v", "--test.run=TestNCCLAllReduce",
                     canned=False, timeout=1500, env={"WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m"})
    return SuiteRun("e2e-nvidia", artifacts, done)


def assert_every_rank_reported(props: dict[str, str], throughput_key: str) -> None:
    for rank in range(WORLD_SIZE):
        value = props.get(f"rank.{rank}.{throughput_key}")
        assert value is not None, f"rank {rank} reported no {throughput_key}: {sorted(props)}"
        assert float(value) > 0, f"rank {rank} {throughput_key} = {value}"
        assert props.get(f"rank.{rank}.node", "?").startswith("kwok-"), props.get(f"rank.{rank}.node")
    assert not any(key.startswith(f"rank.{WORLD_SIZE}.") for key in props), "a rank beyond the world size"
    assert props["metrics.ranks"] == str(WORLD_SIZE)


def test_training_suite_passes_every_test(training: SuiteRun):
    assert training.done.returncode == 0, training.done.stdout[-4000:] + training.done.stderr[-4000:]
    cases = training.cases()
    assert set(TRAINING_TESTS) <= set(cases), sorted(cases)
    for name in TRAINING_TESTS:
        assert cases[name].is_passed, f"{name}: {cases[name].result}"
        assert f"--- PASS: {name}" in training.done.stdout
    assert_runner_junit_intact(training.artifacts)
    config = suite_properties(training.artifacts, training.binary)
    assert config["config.accelerator"] == "cpu" and config["config.workload_size"] == "tiny", config


@pytest.mark.parametrize("test", TRAINING_TESTS)
def test_a_healthy_run_judges_every_check_its_test_declares(training: SuiteRun, test: str):
    """docs/TESTS.md lists each test's declared checks: a healthy CPU run makes every one of them but
    those made only in some runs (EFA expected, a BASELINE), and nothing else."""
    assert_judged_as_declared(test, training.cases()[test])


@pytest.mark.parametrize("test", TRAINING_TESTS)
def test_every_rank_trained_and_the_loss_decreased(training: SuiteRun, test: str):
    props = case_properties(training.cases()[test])
    assert_every_rank_reported(props, TRAINING_TESTS[test])
    for rank in range(WORLD_SIZE):
        first, last = float(props[f"rank.{rank}.loss_first"]), float(props[f"rank.{rank}.loss_last"])
        assert last < first, f"{test} rank {rank}: loss {first} -> {last}"


def test_elastic_recovery_restarted_and_resumed(training: SuiteRun):
    props = case_properties(training.cases()["TestElasticRecovery"])
    assert int(props["elastic.restart_count"]) >= 1, props
    assert int(props["elastic.resumed_from_step"]) >= 5, props  # the first checkpoint is at step 5
    assert props["elastic.deleted_pod"].startswith("nanogpt-elastic-")
    for rank in range(WORLD_SIZE):
        assert int(props[f"rank.{rank}.resumed_from_step"]) == int(props["elastic.resumed_from_step"])


@pytest.mark.parametrize("test", TRAINING_TESTS)
def test_pod_logs_manifests_and_events_are_kept(training: SuiteRun, test: str):
    case = training.cases()[test]
    logs = sorted((training.test_dir(test) / "logs").glob("*.log"))
    current = [log for log in logs if not log.name.endswith(".previous.log")]
    assert len(current) >= WORLD_SIZE, logs  # one pod per node (the elastic test has a replacement)
    for log in logs:
        header, *body = log.read_text().splitlines()
        assert header.startswith("=== pod ") and "| node kwok-" in header, header
        assert header in case.system_out, f"{log.name}'s log is not in the JUnit system-out"
        assert body, f"{log.name} is empty"
    assert any("KT2T_METRICS" in log.read_text() for log in current)
    assert (training.test_dir(test) / "manifests" / "torchrun-job.yaml").is_file()
    events = (training.test_dir(test) / "events.txt").read_text()
    assert "Scheduled" in events or "SuccessfulCreate" in events, events[:2000]


def test_allreduce_over_gloo_through_kubetest2(allreduce: SuiteRun):
    assert allreduce.done.returncode == 0, allreduce.done.stdout[-4000:] + allreduce.done.stderr[-4000:]
    case = allreduce.cases()["TestNCCLAllReduce"]
    assert case.is_passed, case.result
    props = case_properties(case)
    assert_every_rank_reported(props, "busbw_avg")
    logs = list((allreduce.test_dir("TestNCCLAllReduce") / "logs").glob("*.log"))
    assert len(logs) == WORLD_SIZE and all(log.read_text().splitlines()[0] in case.system_out for log in logs)


def test_the_report_page_shows_the_training_run(training: SuiteRun, browser: Chromium, screenshots: Path):
    """The page the binary wrote for this real run, in Chromium: every test passed with both ranks
    drawn and none marked slow, and a loss curve per test."""
    facts = check_run_page(browser, training.artifacts, screenshots / "run-training-suite.png")
    assert {row["verdict"] for row in facts["summary"]} == {"PASS"}
    for section in facts["sections"]:
        charts = {chart["id"].rsplit("-", 1)[-1]: chart for chart in section["charts"]}
        assert sorted(charts["throughput"]["ranks"]) == list(range(WORLD_SIZE)), section["test"]
        assert charts["throughput"]["slow"] == [], section["test"]
        assert "loss" in charts, f"{section['test']}: no loss chart in {sorted(charts)}"
