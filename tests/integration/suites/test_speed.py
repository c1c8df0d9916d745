"""Issue 25's "Done when" on the local cluster's four CPU nodes, through the real kubetest2:
TestNanoGPTTraining recorded with --baseline-out, then judged against that baseline; with
`hack/local-cluster node-slow kwok-cpu-1 0.75` it fails naming kwok-cpu-1 and no other node; and
TestNodePairs with that node slowed fails TestNodePairs/kwok-cpu-1 and no other node.

Each node gets its own share of the machine's cores (`hack/local-cluster node-cpus`), as a real
node has its own CPUs: without it a node's pods ran faster while another node's waited, and
neither the per-node judgement nor the pairs named the slowed node reliably (2026-12-02, shared
cores: healthy runs passed baseline.nodes in 4 of 10, and TestNodePairs named kwok-cpu-2 instead).

What this machine cannot hold is an absolute floor at 0.9 x a baseline run: its CPU itself is not
steady. `bench/host_cpu_noise.py` on a quiet machine (2026-12-02): over 30 s windows the slowest
ran at 0.76 of the fastest, over 5 s windows at 0.53; healthy runs' tokens/s ranged 10.8k-15.9k
against a baseline of 13.2k. So the test that asks every healthy run to pass the throughput floor
as well (the issue's "10 of 10") runs only when asked, KT2T_SPEED_LIVE=1; the judgements that
compare nodes within a run (the machine's noise moves them all alike) run in every pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import LocalCluster, ensure_default_nodes
from ..kubetest2_runs import case_properties, junit_cases, kubetest2

# Speed and pair tests are the full tier's (hack/test --full): four nodes, a baseline and repeated runs.
pytestmark = [pytest.mark.integration, pytest.mark.speed, pytest.mark.full,
              pytest.mark.skipif(os.geteuid() != 0, reason="a node's own CPUs are cgroups: root only")]
LIVE_FLOOR = pytest.mark.opt_in(
    "KT2T_SPEED_LIVE",
    "every healthy run passing an absolute floor of 0.9 x its baseline runs with KT2T_SPEED_LIVE=1: this "
    "machine's CPU speed varies by more than 10% (bench/host_cpu_noise.py; tests/integration/suites/test_speed.py)")

SLOWED = "kwok-cpu-1"
RUNS = int(os.environ.get("KT2T_SPEED_RUNS", "3"))  # healthy runs judged node by node
LIVE_RUNS = int(os.environ.get("KT2T_SPEED_LIVE_RUNS", "10"))  # healthy runs that must pass the floor too
# The product's straggler fraction: these tests judge speed (SHARED_HOST_STRAGGLER_ENV is for the others).
ENV = {"WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", "STRAGGLER_FRACTION": "0.7"}
NODES = [f"kwok-cpu-{i}" for i in range(4)]
# Each node's own share of this machine's cores (`hack/local-cluster node-cpus`), 70% of them in
# all, the rest for the control plane and the harness: 0.35 cores each on 2 cores. Without it the
# four nodes' pods share the cores as the scheduler pleases, and a node runs faster while another
# waits: neither a baseline nor a pair comparison then holds (the module docstring).
NODE_CORES = round(0.7 * (os.cpu_count() or 1) / len(NODES), 2)


@pytest.fixture(scope="module")
def four_nodes(cluster: LocalCluster) -> Iterator[LocalCluster]:
    before = ensure_default_nodes(cluster)
    cluster.set_nodes("cpu", len(NODES))
    try:
        for node in NODES:
            cluster.set_node_cpus(node, NODE_CORES)
        yield cluster
    finally:
        cluster.set_node_slow(SLOWED, None)
        for node in NODES:
            cluster.set_node_cpus(node, None)
        cluster.set_nodes(*before)


def nanogpt(cluster: LocalCluster, artifacts: Path, **env: str):
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia-training", "--test.v", "--test.run=TestNanoGPTTraining$",
                     canned=False, timeout=1500, env={**ENV, **env})
    return done, junit_cases(artifacts, "e2e-nvidia-training")["TestNanoGPTTraining"]


@pytest.fixture(scope="module")
def baseline(four_nodes: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A healthy run's figures (--baseline-out), for the runs judged against them."""
    path = tmp_path_factory.mktemp("speed") / "baseline.jsonl"
    done, _ = nanogpt(four_nodes, path.parent / "record", BASELINE_OUT=str(path))
    assert done.returncode == 0, done.stdout[-4000:]
    assert '"workload": "nanogpt"' in path.read_text() and '"kwok-cpu-3"' in path.read_text()
    return path


def judged_runs(cluster: LocalCluster, baseline: Path, artifacts: Path, runs: int) -> list[tuple[int, str, str]]:
    """`runs` healthy runs against the baseline: (exit code, throughput_minimum, baseline.nodes) each."""
    outcomes = []
    for run in range(runs):
        done, case = nanogpt(cluster, artifacts / f"judge-{run}", BASELINE=str(baseline))
        props = case_properties(case)
        outcomes.append((done.returncode, props.get("check.throughput_minimum", ""),
                         props.get("check.baseline.nodes", "")))
        print(f"run {run + 1}: exit {done.returncode}; {outcomes[-1][1]}; {outcomes[-1][2]}", flush=True)
    return outcomes


def test_healthy_runs_name_no_node_and_a_slowed_node_is_named_alone(four_nodes: LocalCluster, baseline: Path,
                                                                      tmp_path: Path):
    outcomes = judged_runs(four_nodes, baseline, tmp_path, RUNS)
    four_nodes.set_node_slow(SLOWED, 0.75)
    try:
        slowed, case = nanogpt(four_nodes, tmp_path / "slowed", BASELINE=str(baseline))
    finally:
        four_nodes.set_node_slow(SLOWED, None)
    named = case_properties(case).get("check.baseline.nodes", "")
    print(f"{SLOWED} slowed: exit {slowed.returncode}; {named}", flush=True)
    # Judged after the slowed run, so both halves are measured whatever the first shows.
    assert all(nodes.startswith("pass: ") for _, _, nodes in outcomes), outcomes
    assert all("floor from the baseline" in floor for _, floor, _ in outcomes), outcomes
    assert slowed.returncode != 0 and named.startswith("fail: ") and f"node {SLOWED}:" in named, named
    others = [n for n in NODES if n != SLOWED and f"node {n}:" in named]
    assert not others, named


@LIVE_FLOOR
def test_healthy_runs_pass_the_throughput_floor_of_their_baseline(four_nodes: LocalCluster, baseline: Path,
                                                                   tmp_path: Path):
    outcomes = judged_runs(four_nodes, baseline, tmp_path, LIVE_RUNS)
    print(f"against its own baseline: {sum(rc == 0 for rc, _, _ in outcomes)} of {LIVE_RUNS} passed", flush=True)
    assert all(rc == 0 for rc, _, _ in outcomes), outcomes


def node_pairs(cluster: LocalCluster, artifacts: Path) -> dict[str, Any]:
    """TestNodePairs through kubetest2: its per-node cases, by node."""
    done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia", "--test.v", "--test.run=TestNodePairs",
                     canned=False, timeout=1500, env=ENV)
    assert (artifacts / "junit_e2e-nvidia.xml").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    cases = junit_cases(artifacts, "e2e-nvidia")
    per_node = {name.split("/", 1)[1]: case for name, case in cases.items() if name.startswith("TestNodePairs/")}
    assert sorted(per_node) == NODES, sorted(cases)
    for node, case in sorted(per_node.items()):
        props = case_properties(case)
        passes = [f"pass {p}: {props[f'pass{p}.busbw_gbps']} GB/s with {props[f'pass{p}.partners']} "
                  f"(threshold {props[f'pass{p}.threshold_gbps']})" for p in (1, 2)]
        print(f"{node}: {'; '.join(passes)}", flush=True)
    return per_node


def test_node_pairs_of_healthy_nodes_fail_none(four_nodes: LocalCluster, tmp_path: Path):
    per_node = node_pairs(four_nodes, tmp_path / "artifacts")
    assert all(case.is_passed for case in per_node.values()), [n for n, c in per_node.items() if not c.is_passed]


def test_node_pairs_fails_the_slowed_node_and_no_other(four_nodes: LocalCluster, tmp_path: Path):
    four_nodes.set_node_slow(SLOWED, 0.75)
    try:
        per_node = node_pairs(four_nodes, tmp_path / "artifacts")
    finally:
        four_nodes.set_node_slow(SLOWED, None)
    failed = sorted(node for node, case in per_node.items() if not case.is_passed)
    assert failed == [SLOWED], failed
    props = case_properties(per_node[SLOWED])
    assert props["pass1.slow"] == props["pass2.slow"] == "true" and props["pass1.partners"] != props["pass2.partners"]
