"""Verdicts that depend on the cluster, through the real kubetest2 and judged from the artifacts:
canned logs are labelled canned and a foreign workload's logs fail naming it; a real run is
labelled real and judged on its compute probe; a node the local cluster slows down (the node agent
stops its pods' processes a fraction of every 100 ms) is named by the straggler verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from browser.chromium import Chromium
from report_in_browser import check_run_page

from harness.report.junit import summarize

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import case_properties, junit_cases, kubetest2

pytestmark = pytest.mark.integration

SLOW_NODE, NORMAL_NODE = "kwok-cpu-1", "kwok-cpu-0"
# Stopped 75% of every 100 ms: the slowed rank's probe sees a quarter of the CPU or less (measured
# by bench/slow_node.py: 3.8x slower), far below the 0.7 x upper quartile that names a straggler
# and far from flaking; 0.5 would leave the ratio near the threshold on a loaded machine.
SLOW_FRACTION = 0.75


def result_json(artifacts: Path, binary: str, test: str) -> dict:
    return json.loads((artifacts / binary / test / "result.json").read_text())


def rejudge(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.verdict", *map(str, args)], capture_output=True,
                          text=True, check=False, timeout=120)


def test_a_foreign_workloads_canned_logs_fail_naming_the_workload(cluster: LocalCluster, tmp_path: Path):
    ensure_default_nodes(cluster)
    artifacts = tmp_path / "artifacts"
    # The default canned log is upstream BERT's (ranks 0 and 1), the nanoGPT test's pods get it.
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia-training", "--test.run=TestNanoGPTTraining", "--test.v")
    assert done.returncode != 0, done.stdout
    case = junit_cases(artifacts, "e2e-nvidia-training")["TestNanoGPTTraining"]
    (failure,) = case.result
    assert failure.message == ("workload: the logs hold bert metrics (upstream BERT 'Process N' lines), but "
                               "TestNanoGPTTraining runs nanogpt: a foreign or wrong workload's logs")
    props = case_properties(case)
    assert props["execution"] == "canned" and props["check.workload"].startswith("fail: workload:")
    assert "execution=canned: the local cluster served canned pod logs" in done.stdout
    assert "FAIL  TestNanoGPTTraining" in summarize(artifacts / "junit_e2e-nvidia-training.xml")
    assert "[execution=canned]" in summarize(artifacts / "junit_e2e-nvidia-training.xml")
    result = result_json(artifacts, "e2e-nvidia-training", "TestNanoGPTTraining")
    assert (result["test"], result["outcome"], result["execution"]) == ("TestNanoGPTTraining", "FAIL", "canned")
    assert result["message"] == failure.message and result["failed_at"] >= result["started"]
    assert {pod["execution"] for pod in result["pods"]} == {"canned"}
    for pod in result["pods"]:
        assert all((artifacts / "e2e-nvidia-training" / "TestNanoGPTTraining" / log).is_file() for log in pod["logs"])
    # The same verdict from the artifacts alone, offline.
    again = rejudge("--test", "TestNanoGPTTraining", artifacts)
    assert again.returncode == 1 and again.stdout.splitlines()[-1] == f"FAIL: {failure.message}"


def test_a_real_run_is_labelled_real_and_judged_on_its_probe(cluster: LocalCluster, tmp_path: Path):
    ensure_default_nodes(cluster)
    artifacts = tmp_path / "artifacts"
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia", "--test.run=TestNCCLAllReduce", "--test.v",
                     canned=False, timeout=900, env={"JOB_TIMEOUT": "10m"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    props = case_properties(junit_cases(artifacts, "e2e-nvidia")["TestNCCLAllReduce"])
    assert props["execution"] == "real" and "execution=canned" not in done.stdout
    assert props["check.straggler.probe_matmul_tflops"].startswith("pass: probe_matmul_tflops of all 2 ranks")
    result = result_json(artifacts, "e2e-nvidia", "TestNCCLAllReduce")
    assert result["execution"] == "real" and result["metrics"]["probe"]["key"] == "probe_matmul_tflops"
    assert [r["rank"] for r in result["metrics"]["ranks"]] == [0, 1]
    assert all(r["values"]["probe_matmul_tflops"] > 0 for r in result["metrics"]["ranks"])
    assert result["metrics"]["busbw"]["rows"] and result["metrics"]["busbw"]["operation"] == "allreduce"
    checks = {c["name"]: c["status"] for c in result["checks"]}
    assert checks["busbw.floor"] == "not-applicable" and checks["ranks"] == "pass"
    again = rejudge("--test", "TestNCCLAllReduce", artifacts)
    assert again.returncode == 0, again.stdout + again.stderr


# A live straggler judgement on 2 shared cores: the full tier's (the canned GPU runs of
# test_gpu_judgements.py and test_kubetest2.py name a slow node in every pass).
@pytest.mark.speed
@pytest.mark.full
def test_a_slow_node_is_named_by_the_straggler_verdict(default_nodes: LocalCluster, tmp_path: Path,
                                                       browser: Chromium, screenshots: Path):
    artifacts = tmp_path / "artifacts"
    default_nodes.set_node_slow(SLOW_NODE, SLOW_FRACTION)
    try:
        done = kubetest2(default_nodes, artifacts, "exec", "e2e-nvidia-training", "--test.run=TestMNISTTraining",
                         "--test.v", canned=False, timeout=1200,  # the product's STRAGGLER_FRACTION:
                         env={"WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "15m", "STRAGGLER_FRACTION": "0.7"})
    finally:
        default_nodes.set_node_slow(SLOW_NODE, None)
    assert done.returncode != 0, done.stdout[-4000:]
    (failure,) = junit_cases(artifacts, "e2e-nvidia-training")["TestMNISTTraining"].result
    assert failure.message.startswith(f"straggler: node {SLOW_NODE} (rank "), failure.message
    assert "probe_matmul_tflops" in failure.message and NORMAL_NODE not in failure.message
    result = result_json(artifacts, "e2e-nvidia-training", "TestMNISTTraining")
    slow_rank = next(r["rank"] for r in result["metrics"]["ranks"] if r["node"] == SLOW_NODE)
    assert result["metrics"]["slow_ranks"] == [slow_rank] and result["execution"] == "real"
    probe = {c["name"]: c for c in result["checks"]}["straggler.probe_matmul_tflops"]
    assert probe["status"] == "fail" and probe["measured"] < probe["expected"]
    # The slowness was injected, and the artifacts say so.
    assert any(e["reason"] == "Slowed" and SLOW_NODE in e["message"] for e in result["events"])
    # The report shows it: the slow rank marked, the straggler's reason on the first screen.
    facts = check_run_page(browser, artifacts, screenshots / "run-slow-node.png")
    assert any(slow_rank in chart["slow"] for chart in facts["sections"][0]["charts"])
