"""Issue 25's GPU judgements through the real kubetest2 on the local cluster's kwok p5 and p3 nodes:
BERT, nanoGPT and MNIST each judge an applicable throughput floor and compute-time straggler check
on GPU-shaped runs (the canned logs of workloads/canned_gpu_logs.py: synthetic, marked), and a slow node
is named. The verdict, discovery, pod placement and JUnit are the real ones; the numbers are canned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import CANNED_LOG_ANNOTATION as CANNED
from ..kubetest2_runs import assert_judged_as_declared, case_properties, junit_cases, kubetest2

pytestmark = pytest.mark.integration

TESTS = {"bert": "TestBertTraining", "nanogpt": "TestNanoGPTTraining", "mnist": "TestMNISTTraining"}
NODE_TYPES = {"p5": "p5.48xlarge", "p3": "p3.16xlarge"}


# p5 in every pass, p3 too in the full tier: the judgements are the same code on other figures (the unit
# tests judge both shapes' canned logs offline).
@pytest.fixture(scope="module", params=[pytest.param(shape, marks=[pytest.mark.full] if shape != "p5" else [])
                                        for shape in sorted(NODE_TYPES)])
def shape(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[str]:
    """Two kwok nodes of the shape for the module's runs of that shape (set once: node changes are slow)."""
    cluster.set_nodes(request.param, 2)
    try:
        yield request.param
    finally:
        ensure_default_nodes(cluster)


def run(cluster: LocalCluster, artifacts: Path, workload: str, shape: str, variant: str):
    test = TESTS[workload]
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia-training", f"--test.run=^{test}$",
                     f"--nodeType={NODE_TYPES[shape]}",
                     env={"ACCELERATOR": "nvidia",
                          "POD_ANNOTATIONS": f"{CANNED}={workload}-{shape}-{variant}-{{index}}"})
    return done, junit_cases(artifacts, "e2e-nvidia-training")[test]


@pytest.mark.parametrize("workload", sorted(TESTS))
def test_a_healthy_gpu_run_judges_an_applicable_floor_and_compute_straggler_check(
        cluster: LocalCluster, shape: str, workload: str, tmp_path: Path):
    done, case = run(cluster, tmp_path / "artifacts", workload, shape, "healthy")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    props = case_properties(case)
    assert props["execution"] == "canned", props
    assert props["check.throughput_minimum"].startswith("pass: every rank >= "), props
    assert "margin " in props["check.throughput_minimum"], props
    assert props["check.straggler.compute_ms_per_step"].startswith("pass: "), props
    assert props["check.device"].startswith("pass: ") and props["check.gpus"].startswith("pass: "), props
    assert_judged_as_declared(TESTS[workload], case)


@pytest.mark.parametrize("workload", sorted(TESTS))
def test_a_slow_gpu_node_is_named(cluster: LocalCluster, shape: str, workload: str, tmp_path: Path):
    if shape != "p5":
        pytest.skip("one shape is enough for the failure path (the unit tests judge both offline)")
    done, case = run(cluster, tmp_path / "artifacts", workload, shape, "straggler")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    props = case_properties(case)
    named = props["check.straggler.compute_ms_per_step"]
    assert named.startswith("fail: ") and "node kwok-p5-1 (ranks 8-15" in named, props
    assert "kwok-p5-0" not in named, named
