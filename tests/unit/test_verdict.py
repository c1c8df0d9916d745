"""Verdicts: ranks, loss, thresholds and stragglers, with rank, pod, node, measured and expected."""

from __future__ import annotations

import pytest

from harness.errors import TestFailure, ThresholdMissed
from harness.metrics import RankMetrics, WorkloadMetrics, parse_files
from harness.verdict import (
    check_all_ranks_reported,
    check_loss_decreased,
    check_minimum,
    check_stragglers,
    thresholds_for,
)


def bert(*throughputs):
    return WorkloadMetrics("bert", [RankMetrics(i, {"throughput": t}, f"node-{i // 8}", f"pod-{i // 8}")
                                    for i, t in enumerate(throughputs)])


def test_fixture_passes_every_check(fixtures):
    metrics = parse_files([fixtures / "bert-mpirun-32ranks.log"])
    check_all_ranks_reported(metrics, 32)
    check_stragglers(metrics, "throughput", 0.7, "samples/s")
    check_minimum(metrics, "throughput", thresholds_for("p3.16xlarge").bert_samples_per_gpu, "samples/s", "table")


def test_missing_ranks_are_named():
    with pytest.raises(TestFailure, match="2 of 4 ranks reported nothing: ranks 1, 3"):
        check_all_ranks_reported(WorkloadMetrics("bert", [RankMetrics(0), RankMetrics(2)]), 4)


def test_straggler_named_with_pod_node_measured_expected():
    metrics = bert(*([10.0] * 15 + [4.0]))
    with pytest.raises(ThresholdMissed) as err:
        check_stragglers(metrics, "throughput", 0.7, "samples/s")
    message = str(err.value)
    assert "rank 15 (pod pod-1, node node-1)" in message
    assert "4.00 samples/s" in message and "median 10.00" in message and "expected >= 7.00" in message


def test_threshold_missed_states_measured_and_expected():
    with pytest.raises(ThresholdMissed, match=r"rank 1 .* is 5.00 samples/s, expected >= 7.90 samples/s"):
        check_minimum(bert(9.0, 5.0), "throughput", 7.9, "samples/s", "p3.16xlarge table")
    check_minimum(bert(1.0), "throughput", None, "samples/s", "no row")  # no threshold: no check


def test_loss_must_decrease():
    metrics = WorkloadMetrics("bert", [RankMetrics(0, {"loss_first": 5.3, "loss_last": 5.4}, "n0", "p0")])
    with pytest.raises(TestFailure, match=r"loss did not decrease on rank 0 .*first 5\.3000, last 5\.4000"):
        check_loss_decreased(metrics)


def test_threshold_table_rows():
    assert thresholds_for("p5.48xlarge").busbw_gbps == 460
    assert thresholds_for("unknown").busbw_gbps is None
