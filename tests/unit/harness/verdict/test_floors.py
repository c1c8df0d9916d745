"""Throughput floors from the hardware (harness/verdict/thresholds.yaml) and a cluster's own baseline
(harness/verdict/baseline.py): every combination has a floor or says why, the table's FLOPs are
workloads/flops.py's, a baseline judges its own run and names a slowed node, a malformed one names its line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.metrics.records import combine, scan_file
from harness.verdict import baseline
from harness.verdict.bandwidth import judge_busbw
from harness.verdict.checks import Status
from harness.verdict.thresholds import _document, throughput_floor
from harness.verdict.training import WORKLOADS, Expectation, judge_training, workload_size
from workloads.flops import table

CANNED = Path(__file__).resolve().parents[4] / "localcluster" / "emulation" / "canned_logs"


def test_the_tables_flops_per_unit_are_workloads_flops():
    copied = _document()["flops_per_unit"]
    assert {f"{r.workload}/{r.size}" for r in table()} == set(copied)
    for row in table():
        assert copied[f"{row.workload}/{row.size}"] == pytest.approx(row.flops_per_unit, rel=1e-5), row


@pytest.mark.parametrize("node_type", sorted(_document()["node_types"]))
def test_every_gpu_type_workload_and_size_has_a_floor_or_says_why(node_type):
    for row in table():
        floor, why = throughput_floor(node_type, row.workload, row.size)
        assert (floor is None) != (why == ""), (node_type, row)
        if floor is not None:
            assert floor.value > 0 and floor.origin == "table" and "thresholds.yaml" in floor.derivation
        else:
            assert why.startswith(f"no {row.workload}/{row.size} floor"), why


def test_the_p5_floor_is_peak_times_mfu_over_flops():
    floor, _ = throughput_floor("p5.48xlarge", "nanogpt", "gpt2")
    assert floor is not None and floor.value == pytest.approx(989e12 * 0.12 / 8.5477e8, rel=1e-4)
    assert "nanogpt-464" in floor.derivation and "minimum MFU 0.12" in floor.derivation


def test_a_type_with_no_published_busbw_says_so_by_name():
    from harness.metrics.records import scan_lines

    from ...crafted_logs import nccl_table
    sweep = combine([scan_lines(nccl_table(100.0, 8).splitlines(), "x")]).sweep
    (check,) = [c for c in judge_busbw("all_reduce_perf", sweep, "g5.48xlarge", 1).checks if c.name == "busbw.floor"]
    assert check.status is Status.NOT_APPLICABLE and "none published (found): 8 x A10G over PCIe" in check.message


def canned(workload: str, variant: str):
    return combine([scan_file(CANNED / f"{workload}-p5-{variant}-{i}.log") for i in (0, 1)])


def expect(judged_by: baseline.Baseline | None = None, node_type: str = "p5.48xlarge") -> Expectation:
    return Expectation("TestNanoGPTTraining", WORKLOADS["nanogpt"], 16, node_type, 0.7, None, baseline=judged_by)


def written(tmp_path: Path) -> baseline.Baseline:
    metrics = canned("nanogpt", "healthy")
    path = tmp_path / "baseline.jsonl"
    baseline.append(str(path), baseline.entry_of(metrics, "TestNanoGPTTraining", "p5.48xlarge", "tokens_per_s",
                                                 workload_size(metrics), {"python": "3"}, {"training_image": "x"}))
    return baseline.load(str(path), 0.9)


def test_a_run_passes_against_its_own_baseline_and_the_floor_says_where_it_came_from(tmp_path):
    judged_by = written(tmp_path)
    metrics = canned("nanogpt", "healthy")
    verdict = judge_training(metrics, expect(judged_by))
    verdict.extend(baseline.judge_nodes(metrics, judged_by, "p5.48xlarge", "gpt2"))
    assert verdict.passed, verdict.lines()
    (floor,) = [c for c in verdict.checks if c.name == "throughput_minimum"]
    assert "margin 1.11x; floor from the baseline: " in floor.message and "line 2" in floor.message, floor.message
    assert verdict.references["minimum"]["origin"] == "baseline"


def test_a_slowed_node_is_named_against_its_own_baseline(tmp_path):
    judged_by = written(tmp_path)
    metrics = canned("nanogpt", "straggler")
    (check,) = baseline.judge_nodes(metrics, judged_by, "p5.48xlarge", "gpt2").checks
    assert check.status is Status.FAIL and "node kwok-p5-1: " in check.message, check.message
    assert "node kwok-p5-0" not in check.message


def test_a_baseline_of_another_type_workload_or_size_is_not_applicable(tmp_path):
    judged_by = written(tmp_path)
    (check,) = baseline.judge_nodes(canned("nanogpt", "healthy"), judged_by, "p3.16xlarge", "gpt2").checks
    assert check.status is Status.NOT_APPLICABLE and "has no p3.16xlarge nanogpt/gpt2" in check.message
    floor, why = judged_by.throughput_floor("p5.48xlarge", "nanogpt", "small", "tokens_per_s")
    assert floor is None and "it holds p5.48xlarge nanogpt/gpt2" in why


@pytest.mark.parametrize(("text", "named"), [
    ("", "line 1: the file is empty"),
    ('{"kind": "other"}\n', "line 1: expected the header"),
    ('{"kind": "kt2t-baseline", "version": 1}\n{"node_type": 3}\n', "line 2: node_type is 3, expected a str"),
    ('{"kind": "kt2t-baseline", "version": 1}\n\n{oops\n', "line 3: not JSON"),
    ('{"kind": "kt2t-baseline", "version": 1}\n' + json.dumps({"node_type": "a", "workload": "b", "throughput_key": "c",
                                                              "step_ms": -1}) + "\n", "line 2: step_ms is -1"),
])
def test_a_malformed_baseline_is_a_usage_error_naming_the_line(tmp_path, text, named):
    path = tmp_path / "b.jsonl"
    path.write_text(text)
    with pytest.raises(baseline.BaselineError, match=named):
        baseline.load.__wrapped__(str(path), 0.9)


def test_the_report_shows_the_floor_its_origin_and_the_margin():
    from harness.report.html import rank_section
    from harness.report.inputs import _metrics

    ranks = [{"rank": r, "node": f"kwok-p5-{r}", "pod": f"p-{r}", "values": {"tokens_per_s": 150000.0 + r}}
             for r in range(2)]
    metrics = _metrics({"workload": "nanogpt", "throughput": {"key": "tokens_per_s", "unit": "tokens/s"},
                        "ranks": ranks, "references": {"minimum": {
                            "key": "tokens_per_s", "value": 138800.0, "origin": "table", "margin": 1.08,
                            "source": "p5.48xlarge (H100) nanogpt/gpt2: 9.89e+14 FLOP/s bf16 peak x minimum MFU 0.12",
                        }}})
    assert metrics is not None
    html = rank_section(metrics, "tokens_per_s", "tokens/s", "Throughput", "c1")
    assert ('<p class="floor">Floor 138,800 tokens/s per GPU, from the table: p5.48xlarge (H100) nanogpt/gpt2: '
            '9.89e+14 FLOP/s bf16 peak x minimum MFU 0.12; margin 1.08x (lowest rank / floor)</p>') in html, html[:2000]


def test_a_slowdown_of_every_node_alike_names_no_node(tmp_path):
    """A loaded shared host slows every node: the nodes' median margin moves with it."""
    judged_by = written(tmp_path)
    metrics = canned("nanogpt", "healthy")
    for rank in metrics.ranks:
        rank.values["compute_ms_per_step"] *= 1.4
        rank.values["probe_matmul_tflops"] /= 1.4
    (check,) = baseline.judge_nodes(metrics, judged_by, "p5.48xlarge", "gpt2").checks
    assert check.status is Status.PASS, check.message


# ---- bus bandwidth against a cluster's own baseline (TestNCCLAllReduce's workloads.allreduce) ----

def sweep_metrics(peak_gbps: float, max_bytes: int = 2**30):
    from harness.metrics.records import scan_lines

    from ...crafted_logs import nccl_table
    return combine([scan_lines(nccl_table(peak_gbps, 16, max_bytes).splitlines(), "x")])


def busbw_baseline(tmp_path: Path, metrics) -> baseline.Baseline:
    entry = baseline.entry_of(metrics, "TestNCCLAllReduce", "kwok-cpu", "busbw_gbps", "tiny", {}, {})
    entry["workload"] = "allreduce"
    assert (entry["busbw_bytes"], entry["busbw_gbps"]) == (metrics.sweep.max_size, pytest.approx(94.1, abs=0.1))
    path = tmp_path / "baseline.jsonl"
    baseline.append(str(path), entry)
    return baseline.load.__wrapped__(str(path), 0.9)


def busbw_floor_check(metrics, judged_by: baseline.Baseline, node_type: str = "kwok-cpu"):
    from harness.verdict.bandwidth import BaselineKey

    key = BaselineKey(judged_by, "allreduce", "tiny")
    verdict = judge_busbw("allreduce", metrics.sweep, node_type, 2, baseline=key)
    (check,) = [c for c in verdict.checks if c.name == "busbw.floor"]
    return check, verdict


def test_bus_bandwidth_is_judged_against_the_baseline_at_the_same_size(tmp_path):
    judged_by = busbw_baseline(tmp_path, sweep_metrics(100.0))
    check, verdict = busbw_floor_check(sweep_metrics(95.0), judged_by)
    assert check.status is Status.PASS, check.message
    assert "(margin 1.06x; BASELINE_TOLERANCE 0.9 x 94.1" in check.message, check.message
    assert " GB/s, this cluster's own figure at 1 GiB in the baseline " in check.message
    assert check.message.rstrip(")").endswith("line 2")
    assert verdict.references["busbw"]["floor_source"].startswith("baseline ")
    check, _ = busbw_floor_check(sweep_metrics(80.0), judged_by)
    assert check.status is Status.FAIL and check.message.startswith("threshold: bus bandwidth at 1 GiB"), check.message


def test_a_baseline_sweep_of_another_size_is_not_compared(tmp_path):
    judged_by = busbw_baseline(tmp_path, sweep_metrics(100.0))
    # kwok-cpu has no table floor either: not applicable, saying both why not.
    check, _ = busbw_floor_check(sweep_metrics(100.0, max_bytes=2**28), judged_by)
    assert check.status is Status.NOT_APPLICABLE
    assert "measured bus bandwidth at 1 GiB, this sweep's largest message is 256 MiB: not comparable" in check.message
    # The table then: p5's multi-node row has no floor a user could check (issue 43), and says how to get one.
    check, _ = busbw_floor_check(sweep_metrics(100.0, max_bytes=2**28), judged_by, "p5.48xlarge")
    assert check.status is Status.NOT_APPLICABLE
    assert "none published that a user can check" in check.message and "BASELINE_OUT" in check.message, check.message


def test_the_offline_verdict_takes_a_baseline_and_a_malformed_one_is_a_usage_error(tmp_path, capsys):
    from harness.verdict.rejudge import run

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "kt2t-baseline", "version": 1}\n{"node_type": 3}\n')
    logs = [str(CANNED / f"nanogpt-p5-healthy-{i}.log") for i in (0, 1)]
    args = ["--test", "TestNanoGPTTraining", "--world-size", "16", "--node-type", "p5.48xlarge", *logs]
    assert run([*args, "--baseline", str(bad)]) == 2
    assert "line 2: node_type is 3, expected a str" in capsys.readouterr().err
    good = written(tmp_path)
    assert run([*args, "--baseline", good.path]) == 0
    out = capsys.readouterr().out
    assert "floor from the baseline" in out and "baseline.nodes" in out, out
