"""The verdict on a table-driven corpus of broken runs (each must fail, naming what is wrong) and on
healthy logs of 8, 16 and 32 ranks, single and multi-node (each must pass)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.errors import TestFailure, ThresholdMissed
from harness.metrics.records import combine, parse_files, scan_lines
from harness.verdict.bandwidth import judge_busbw
from harness.verdict.checks import Check, Status, Verdict
from harness.verdict.training import WORKLOADS, Expectation, check_parse, judge_training

from ...crafted_logs import GIB, metrics_line, metrics_record, nccl_table, step_lines, training_log


@dataclass(frozen=True)
class Run:
    """A log and what the test expected of it."""

    log: str
    workload: str = "bert"
    world_size: int = 2
    node_type: str | None = "kwok-cpu"
    test: str = "TestX"
    min_throughput: float | None = None
    # For bandwidth runs: the operation and node count (None: a training verdict).
    busbw: tuple[str, int] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)


def verdict_of(run: Run) -> Verdict:
    metrics = combine([scan_lines(run.log.splitlines(), "run.log")])
    if run.busbw is not None:
        verdict = Verdict([check_parse(metrics)])
        verdict.extend(judge_busbw(run.busbw[0], metrics.sweep, run.node_type, run.busbw[1],
                                   run.overrides.get("min_busbw")))
        return verdict
    return judge_training(metrics, Expectation(run.test, WORKLOADS[run.workload], run.world_size, run.node_type,
                                               0.7, run.min_throughput))


def log_of(records: list[dict[str, Any]], steps: dict[int, list[str]] | None = None) -> str:
    lines = [line for rank_steps in (steps or {}).values() for line in rank_steps]
    return "\n".join(lines + [metrics_line(r) for r in records]) + "\n"


def records(world_size: int, workload: str = "bert", gpus_per_node: int = 1, **per_rank: dict[str, Any]) -> list:
    """Healthy records, with rank-specific overrides given as r<rank>={...}."""
    return [{**metrics_record(rank, world_size, workload, gpus_per_node), **per_rank.get(f"r{rank}", {})}
            for rank in range(world_size)]


def iter_log(*losses: str) -> str:
    return "".join(f"iter {i}: loss {loss}, time 10.00ms, mfu n/a\n" for i, loss in enumerate(losses))


BERT_32 = Path("tests/fixtures/bert-mpirun-32ranks.log").read_text()
NCCL_16_CANNED = Path("localcluster/emulation/canned_logs/nccl-tests-16gpus-efa.log").read_text()


def bert_upstream(world_size: int = 2, throughput: str = "9.91") -> str:
    return "".join(f"[1,{r}]<stdout>:Process {r} - Throughput: {throughput} samples/second\n"
                   for r in range(world_size))


def probe_slow(ranks: range, value: float = 100.0, compute_ms: float = 400.0) -> dict[str, dict[str, Any]]:
    """Ranks slow on both compute signals, the probe and the compute window: they must agree to name a node."""
    return {f"r{r}": {"probe_matmul_tflops": value, "compute_ms_per_step": compute_ms} for r in ranks}


NAN_STEP = 'KT2T_STEP {"rank":0,"step":5,"loss":null,"nonfinite":["loss"]}'
# (id, run, failing check, text the failing check's message must hold)
BROKEN = [
    ("nan-loss-and-throughput-null", Run(log_of(records(1, "nanogpt", r0={
        "loss_last": None, "tokens_per_s": None, "nonfinite": ["loss_last", "tokens_per_s"]})), "nanogpt", 1),
     "loss", "loss_last is NaN/inf on rank 0 (pod nanogpt-worker-0, node node-0)"),
    ("nan-throughput", Run(log_of(records(1, "nanogpt", r0={"tokens_per_s": None, "nonfinite": ["tokens_per_s"]})),
                           "nanogpt", 1), "throughput", "tokens_per_s is NaN/inf on rank 0"),
    ("nan-in-the-step-series", Run(log_of(records(1), {0: [*step_lines(0)[:5], NAN_STEP]}), world_size=1),
     "loss", "loss is NaN/inf on rank 0 (pod bert-worker-0, node node-0) at step 5"),
    ("inf-to-5-is-no-decrease", Run(iter_log("inf", "9.0", "5.0"), "nanogpt", 1), "loss", "loss is NaN/inf on rank 0"),
    ("inf-to-5-in-records", Run(log_of(records(1, r0={"loss_first": None, "nonfinite": ["loss_first"]})), world_size=1),
     "loss", "loss_first is NaN/inf"),
    ("nanogpt-iter-loss-rising", Run(iter_log("3.0", "5.0", "7.0", "9.0"), "nanogpt", 1), "loss",
     "loss did not decrease on rank 0 (pod ?, node ?): mean of the first 1 steps 3.0000, of the last 1 9.0000"),
    ("nanogpt-iter-has-no-tokens-per-s", Run(iter_log("9.0", "5.0"), "nanogpt", 1), "throughput",
     "rank 0 (pod ?, node ?) reported no tokens_per_s"),
    ("rising-then-a-final-dip", Run(log_of(records(1), {0: [
        f'KT2T_STEP {{"rank":0,"step":{i},"loss":{loss}}}' for i, loss in enumerate([5, 5, 6, 7, 8, 9, 9, 4])]}),
        world_size=1), "loss", "mean of the first 2 steps 5.0000, of the last 2 6.5000"),
    ("bert-logs-under-nanogpt", Run(bert_upstream(), "nanogpt", test="TestNanoGPTTraining"), "workload",
     "the logs hold bert metrics (upstream BERT 'Process N' lines), but TestNanoGPTTraining runs nanogpt"),
    ("bert-logs-under-mnist", Run(bert_upstream(), "mnist", test="TestMNISTTraining"), "workload",
     "TestMNISTTraining runs mnist"),
    ("kt2t-bert-records-under-nanogpt", Run(log_of(records(2)), "nanogpt", test="TestNanoGPTTraining"), "workload",
     "the logs hold bert metrics (KT2T_METRICS records)"),
    ("two-workloads-in-one-job", Run(log_of([metrics_record(0, 2), metrics_record(1, 2, "mnist")])), "workload",
     "the logs hold bert, mnist metrics"),
    ("missing-throughput-key", Run(log_of(records(2, "nanogpt", r1={"tokens_per_s": None})), "nanogpt"),
     "throughput", "rank 1 (pod nanogpt-worker-1, node node-1) reported no tokens_per_s"),
    ("32-ranks-for-a-2-rank-job", Run(log_of(records(32, gpus_per_node=8))), "ranks",
     "ranks outside 0..1 reported: 2-31"),
    ("32-upstream-ranks-for-a-2-rank-job", Run(BERT_32), "ranks", "ranks outside 0..1 reported: 2-31"),
    ("a-rank-with-no-values", Run(log_of([metrics_record(0, 2), {"workload": "bert", "rank": 1, "world_size": 2}])),
     "ranks", "ranks with no values: 1"),
    ("duplicate-rank-different-values", Run(log_of([*records(2), metrics_record(1, 2, throughput=1.0)])), "parse",
     "one KT2T_METRICS record for rank 1, found two with different values: run.log:2 and run.log:3"),
    ("another-world-size", Run(log_of(records(2, r1={"world_size": 4}))), "ranks",
     "ranks reporting another world size than 2: rank 1 (4)"),
    ("replicas-diverged", Run(log_of(records(2, r1={"params_checksum": -1234.5677}))), "replicas",
     "replicas diverged (params_checksum differs"),
    ("params-checksum-missing", Run(log_of(records(2, r0={"params_checksum": None}))), "replicas",
     "rank 0 (pod bert-worker-0, node node-0) reported no params_checksum"),
    ("fewer-steps-than-requested", Run(log_of(records(2, r1={"steps_completed": 12}))), "steps",
     "rank 1 (pod bert-worker-1, node node-1) completed 12 of 20 steps"),
    ("steps-requested-missing", Run(log_of(records(2, r0={"steps_requested": None}))), "steps",
     "rank 0 (pod bert-worker-0, node node-0) reported no steps_requested"),
    ("missing-ranks", Run(log_of(records(4)[:2]), world_size=4), "ranks", "2 of 4 ranks reported nothing: ranks 2-3"),
    ("three-of-five-slow-hide-in-the-median", Run(log_of(records(5, **probe_slow(range(2, 5)))), world_size=5),
     "straggler.probe_matmul_tflops", "straggler: node node-2 (rank 2, pod bert-worker-2): probe_matmul_tflops 100 "
     "TFLOP/s vs reference 250 (threshold 175: upper quartile x STRAGGLER_FRACTION 0.7; one figure per rank: its "
     "spread is unknown; compute_ms_per_step 400 ms (threshold 201.4) agrees); node node-3 (rank 3"),
    ("a-slow-node-in-synchronous-training", Run(log_of(records(16, gpus_per_node=8, **probe_slow(range(8, 16), 120.0))),
                                                world_size=16),
     "straggler.probe_matmul_tflops", "straggler: node node-1 (ranks 8-15, pod bert-worker-1): probe_matmul_tflops "
     "median 120 TFLOP/s vs reference 251.2 (threshold 175.9: upper quartile x STRAGGLER_FRACTION 0.7"),
    ("a-slow-probe-of-allreduce", Run(log_of(records(4, "allreduce", r3={"probe_matmul_tflops": 60.0})),
                                      "allreduce", 4),
     "straggler.probe_matmul_tflops",
     "straggler: node node-3 (rank 3, pod allreduce-worker-3): probe_matmul_tflops 60"),
    ("slow-compute-time", Run(log_of(records(4, r3={"compute_ms_per_step": 400.0, "probe_matmul_tflops": 100.0})),
                              world_size=4),
     "straggler.compute_ms_per_step", "straggler: node node-3 (rank 3, pod bert-worker-3): compute_ms_per_step 400 ms "
     "vs reference 140 (threshold 200: lower quartile / STRAGGLER_FRACTION 0.7; one figure per rank"),
    ("throughput-straggler", Run(log_of(records(16, gpus_per_node=8, r13={
        "throughput": 40.0, "probe_matmul_tflops": 100.0, "compute_ms_per_step": 400.0})), world_size=16),
     "straggler.throughput", "straggler: node node-1 (rank 13, pod bert-worker-1): throughput 40 samples/s"),
    ("a-rank-without-its-probe", Run(log_of(records(2, r1={"probe_matmul_tflops": None}))),
     "straggler.probe_matmul_tflops", "rank 1 (pod bert-worker-1, node node-1) reported no probe_matmul_tflops"),
    ("no-probe-at-all", Run(log_of([{k: v for k, v in r.items() if not k.startswith("probe_")} for r in records(2)])),
     "straggler.probe", "the workload reported no compute probe"),
    ("below-the-node-types-minimum", Run(bert_upstream(2, "5.00"), world_size=2, node_type="p3.16xlarge"),
     "throughput_minimum", "threshold: throughput on rank 0 (pod ?, node ?) is 5 samples/s, expected >= 7.9 "
     "samples/s (margin 0.63x; floor from the table: p3.16xlarge table: upstream-bert-32)"),
    ("below-min-throughput-per-gpu", Run(bert_upstream(2), min_throughput=12.0), "throughput_minimum",
     "is 9.91 samples/s, expected >= 12 samples/s (margin 0.83x; floor from the setting: MIN_THROUGHPUT_PER_GPU)"),
    ("malformed-throughput", Run(bert_upstream(1) + "[1,1]<stdout>:Process 1 - Throughput: 1.2.3 samples/second\n"),
     "parse", "run.log:2: expected Process 1 - Throughput: a number, found '1.2.3'"),
    ("a-rank-cut-off-mid-line", Run(log_of(records(2)).rstrip("\n").rpartition("\n")[0] + "\n" +
                                    metrics_line(metrics_record(1, 2))[:40]), "ranks",
     "1 of 2 ranks reported nothing: ranks 1"),
    ("record-rank-is-not-its-tag", Run(log_of(records(1)) + f"[1,1]<stdout>:{metrics_line(metrics_record(0, 2))}\n",
                                       world_size=1), "parse", "rank 0 in a line mpirun tagged as rank 1"),
    ("bert-line-rank-is-not-its-tag", Run("[1,0]<stdout>:Process 1 - Throughput: 9.00 samples/second\n", world_size=2),
     "parse", "Process 1: the rank mpirun tagged the line with (0)"),
    # Bandwidth (a foreign check: same corpus, the busbw verdict).
    ("p5-single-node-below-floor", Run(nccl_table(300.0, 8), node_type="p5.48xlarge", busbw=("all_reduce_perf", 1)),
     "busbw.floor", "threshold: bus bandwidth at 16 GiB (the sweep's largest message): 298.83 GB/s out-of-place, "
     "298.83 GB/s in-place, expected >= 414.00 GB/s (margin 0.72x; 0.9 x 460 GB/s, the p5.48xlarge single-node "
     "all_reduce floor"),
    ("sweep-stops-short-of-the-floor-size", Run(nccl_table(470.0, 8, max_bytes=2 * GIB), node_type="p5.48xlarge",
                                                busbw=("all_reduce_perf", 1)),
     "busbw.floor", "the sweep's largest message is 2 GiB (the header asked for 2 GiB), but the p5.48xlarge "
     "single-node all_reduce floor is measured at 16 GiB"),
    ("wrong-values-in-a-row", Run(nccl_table(470.0, 8, wrong=3), node_type="p5.48xlarge", busbw=("all_reduce_perf", 1)),
     "busbw.table", "bandwidth: wrong results: size 8 B: 3 wrong out-of-place"),
    ("no-table-rows", Run("# Avg bus bandwidth    : 400.0\n", node_type="p5.48xlarge", busbw=("all_reduce_perf", 1)),
     "busbw.table", "no nccl-tests table rows in the logs"),
    ("unparseable-busbw-in-a-row", Run(nccl_table(470.0, 8).replace(" 468.17 ", " 46x.1 ", 1), node_type="p5.48xlarge",
                                       busbw=("all_reduce_perf", 1)), "parse", "busbw: a number, found '46x.1'"),
    ("min-busbw-override", Run(nccl_table(178.0, 16), node_type="p4d.24xlarge", busbw=("all_reduce_perf", 2),
                               overrides={"min_busbw": 228.0}),
     "busbw.floor", "expected >= 205.20 GB/s (margin 0.86x; 0.9 x 228 from NCCL_TESTS_MIN_BW)"),
]


@pytest.mark.parametrize(("run", "check", "text"), [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_every_broken_run_fails_naming_what_is_wrong(run: Run, check: str, text: str):
    verdict = verdict_of(run)
    assert not verdict.passed, verdict.lines()
    failed = {c.name: c.message for c in verdict.failures}
    assert check in failed, f"{check} did not fail; failures: {failed}"
    assert text in failed[check], failed[check]
    with pytest.raises(TestFailure):
        verdict.raise_if_failed()


def test_the_corpus_is_large_enough():
    assert len(BROKEN) >= 25


HEALTHY = [
    ("bert-8-ranks-one-p4d", Run(training_log(8), world_size=8, node_type="p4d.24xlarge")),
    ("bert-16-ranks-two-p5", Run(training_log(16), world_size=16, node_type="p5.48xlarge")),
    ("nanogpt-2-cpu-ranks", Run(training_log(2, "nanogpt", gpus_per_node=1), "nanogpt", 2, "kwok-cpu")),
    ("mnist-16-ranks-tagged", Run("".join(f"[1,{i // 21}]<stdout>:{line}\n" for i, line in enumerate(
        training_log(16, "mnist").splitlines())), "mnist", 16, "kwok-cpu")),  # CPU-like figures
    ("upstream-bert-32-ranks-p3", Run(BERT_32, world_size=32, node_type="p3.16xlarge")),
    ("nccl-8-gpus-one-p4d", Run(nccl_table(232.0, 8), node_type="p4d.24xlarge", busbw=("all_reduce_perf", 1))),
    ("nccl-16-gpus-two-p4d-canned", Run(NCCL_16_CANNED,
                                        node_type="p4d.24xlarge", busbw=("all_reduce_perf", 2))),
    ("nccl-8-gpus-one-p5", Run(nccl_table(470.0, 8), node_type="p5.48xlarge", busbw=("all_reduce_perf", 1))),
    ("nccl-16-gpus-two-p5", Run(nccl_table(480.0, 16, tag=True), node_type="p5.48xlarge",
                                busbw=("all_reduce_perf", 2))),
    ("nccl-16-gpus-two-p5-to-2g", Run(nccl_table(441.0, 16, max_bytes=2 * GIB), node_type="p5.48xlarge",
                                      busbw=("all_reduce_perf", 2))),
    ("all-gather-no-floor", Run(nccl_table(300.0, 16), node_type="p5.48xlarge", busbw=("all_gather_perf", 2))),
]


@pytest.mark.parametrize("run", [case[1] for case in HEALTHY], ids=[case[0] for case in HEALTHY])
def test_healthy_runs_pass(run: Run):
    verdict = verdict_of(run)
    assert verdict.passed, verdict.lines()
    verdict.raise_if_failed()


def test_the_healthy_16_gpu_canned_log_averages_70_but_is_judged_at_16_gib():
    metrics = parse_files([Path("localcluster/emulation/canned_logs/nccl-tests-16gpus-efa.log")])
    verdict = judge_busbw("all_reduce_perf", metrics.sweep, "p4d.24xlarge", 2, 160.0)
    assert verdict.passed and metrics.sweep.average == pytest.approx(70.3741)
    (floor,) = [c for c in verdict.checks if c.name == "busbw.floor"]
    assert floor.message.startswith("bus bandwidth at 16 GiB (the sweep's largest message): 178.09 GB/s "
                                    "out-of-place, 176.32 GB/s in-place, expected >= 144.00 GB/s")
    section = verdict.references["busbw"]
    assert section["judged_sizes"] == [16 * GIB] and section["average_gbps"] == pytest.approx(70.3741)


def test_not_applicable_only_where_it_does_not_apply():
    verdict = verdict_of(Run(log_of(records(1)), world_size=1, node_type="kwok-cpu"))
    assert verdict.passed
    statuses = {c.name: (c.status, c.message) for c in verdict.checks}
    assert statuses["throughput_minimum"] == (Status.NOT_APPLICABLE,
                                              "no throughput floor: kwok-cpu is not in the table (none until measured)")
    assert statuses["straggler.probe_matmul_tflops"] == (Status.NOT_APPLICABLE, "1 rank: no other rank to compare with")
    assert "throughput_minimum (no throughput floor: kwok-cpu is not in the table" in verdict.summary()
    assert "not applicable: device (the accelerator is not known" in verdict.summary()


def test_fsdp_shards_have_no_replicas_to_compare_but_ddp_replicas_still_do():
    fsdp = {"sharding": "fsdp"}
    sharded = verdict_of(Run(log_of(records(2, "nanogpt", r0=fsdp, r1={**fsdp, "params_checksum": 5.0})), "nanogpt"))
    replicas = next(c for c in sharded.checks if c.name == "replicas")
    assert replicas.status == Status.NOT_APPLICABLE and "FSDP shards" in replicas.message, replicas
    # One rank on DDP: the replicas are judged, and these diverged.
    mixed = verdict_of(Run(log_of(records(2, "nanogpt", r0=fsdp, r1={"sharding": "ddp", "params_checksum": 5.0})),
                           "nanogpt"))
    assert next(c for c in mixed.checks if c.name == "replicas").status == Status.FAIL


def test_the_first_failing_check_is_the_message_and_a_threshold_is_threshold_missed():
    verdict = verdict_of(Run(bert_upstream(2, "5.00"), node_type="p3.16xlarge"))
    with pytest.raises(ThresholdMissed, match="^threshold: throughput on rank 0"):
        verdict.raise_if_failed()
    props = verdict.properties()
    assert props["check.throughput_minimum"].startswith("fail: threshold: throughput on rank 0")
    assert props["check.workload"] == "pass: the logs are bert's"
    assert props["checks.ran"].split(",")[:3] == ["parse", "workload", "ranks"]


def test_a_slow_node_is_named_with_references_and_slow_ranks_for_the_report():
    verdict = verdict_of(Run(log_of(records(16, gpus_per_node=8, **probe_slow(range(8, 16), 120.0))), world_size=16))
    assert verdict.slow_ranks == set(range(8, 16))
    reference = verdict.references["probe_matmul_tflops"]
    assert reference["reference"] == pytest.approx(251.25) and reference["threshold"] == pytest.approx(175.875)
    (check,) = [c for c in verdict.failures if c.name == "straggler.probe_matmul_tflops"]
    assert (check.measured, check.unit) == (120.0, "TFLOP/s")
    json.dumps([c.as_dict() for c in verdict.checks], allow_nan=False)


def test_a_compute_time_too_short_to_measure_is_not_compared():
    """Tiny models' steps of a few ms: healthy ranks' compute times differed 4.9x on the local cluster."""
    verdict = verdict_of(Run(log_of(records(2, r0={"compute_ms_per_step": 7.0}, r1={"compute_ms_per_step": 34.0}))))
    assert verdict.passed, verdict.lines()
    (check,) = [c for c in verdict.checks if c.name == "straggler.compute_ms_per_step"]
    assert check.status is Status.NOT_APPLICABLE
    assert check.message.startswith("a step's compute time (7-34 ms) is too short to compare ranks")


def test_a_time_boxed_compute_window_is_compared_at_gpu_step_times():
    """compute_seconds >= 1 on every rank: a 1 ms step is compared, and the slow node is named."""
    window = {"compute_seconds": 2.0, "compute_steps": 2000}
    fast = {f"r{r}": {**window, "compute_ms_per_step": 1.0} for r in range(3)}
    verdict = verdict_of(Run(log_of(records(4, **fast, r3={**window, "compute_ms_per_step": 1.7,
                                                            "probe_matmul_tflops": 100.0})), world_size=4))
    (check,) = [c for c in verdict.checks if c.name == "straggler.compute_ms_per_step"]
    assert check.status is Status.FAIL and "rank 3" in check.message, check.message
    assert "node " in check.message and check.measured == pytest.approx(1.7)


def test_a_compute_window_under_a_second_on_one_rank_is_not_compared():
    window = {"compute_seconds": 2.0, "compute_ms_per_step": 1.0}
    verdict = verdict_of(Run(log_of(records(2, r0=window, r1={**window, "compute_seconds": 0.4}))))
    (check,) = [c for c in verdict.checks if c.name == "straggler.compute_ms_per_step"]
    assert check.status is Status.NOT_APPLICABLE
    assert "under 1 s (compute_seconds) on 1 of 2 ranks: rank 1" in check.message, check.message


def spread(key: str, median: float, low: float, high: float) -> dict[str, float]:
    """A figure as the workloads report it since issue 43: the median of 5 slices and their range."""
    return {key: median, f"{key}_min": low, f"{key}_max": high, f"{key}_repeats": 5}


def cpu_rank(probe: tuple[float, float, float], compute: tuple[float, float, float], tokens: float = 900.0,
             host: str = "boot-a") -> dict[str, Any]:
    """A CPU rank of the local cluster's real nodes: probe and compute window with their spread."""
    return {"device": "cpu", "host_boot_id": host, "tokens_per_s": tokens,
            **spread("probe_matmul_tflops", *probe), "compute_seconds": 2.0, "compute_steps": 12,
            **spread("compute_ms_per_step", *compute)}


def straggler_checks(verdict: Verdict) -> dict[str, Check]:
    return {c.name: c for c in verdict.checks if c.name.startswith("straggler.")}


def test_one_short_probe_on_a_busy_host_names_no_node():
    """Issue 43's false fail: the fresh machine's main job named real-cpu-0 on its probe alone
    (0.06951 vs 0.1047 TFLOP/s) while its compute window and throughput were in range; here even its
    best slice is below the threshold, and only the compute window's disagreement keeps it unnamed."""
    run = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                             r0=cpu_rank((0.06, 0.057, 0.064), (180.0, 176.0, 186.0)),
                             r1=cpu_rank((0.1047, 0.101, 0.108), (171.0, 168.0, 175.0)))), "nanogpt", 2)
    verdict = verdict_of(run)
    assert verdict.passed, verdict.lines()
    probe = straggler_checks(verdict)["straggler.probe_matmul_tflops"]
    assert probe.status is Status.PASS and not verdict.slow_ranks
    assert probe.message.startswith("probe_matmul_tflops: no node named, the evidence does not hold beyond the "
                                    "noise: 1 of 2 ranks below the threshold"), probe.message
    assert "rank 0 (pod nanogpt-worker-0, node node-0) 0.06 TFLOP/s: its compute_ms_per_step (180 ms, " \
           "threshold 247.5) does not agree" in probe.message, probe.message


def test_a_rank_whose_best_slice_reaches_the_reference_is_not_named():
    """Below the threshold on its median, but one of its slices ran at full speed: noise, not a slow node."""
    run = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                             r0=cpu_rank((0.06, 0.05, 0.1), (400.0, 170.0, 600.0)),
                             r1=cpu_rank((0.1, 0.098, 0.103), (170.0, 168.0, 173.0)))), "nanogpt", 2)
    verdict = verdict_of(run)
    assert verdict.passed, verdict.lines()
    checks = straggler_checks(verdict)
    assert "its best of 5 slices was 0.1 TFLOP/s, as fast as the reference" in checks[
        "straggler.probe_matmul_tflops"].message
    assert "its best of 5 slices was 170 ms, as fast as the reference" in checks[
        "straggler.compute_ms_per_step"].message


def test_a_slowed_node_with_one_lucky_slice_is_still_named():
    """bench/false_fails.py, slowed run 8 of 10: kwok-cpu-1 at half its time measured 0.0477 against a reference
    of 0.112 TFLOP/s; one slice reached 0.0933, above the threshold (0.0784) but below the reference."""
    run = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                             r0=cpu_rank((0.12, 0.11, 0.125), (29.0, 28.0, 31.0)),
                             r1=cpu_rank((0.0477, 0.04, 0.0933), (54.66, 36.74, 70.0)))), "nanogpt", 2)
    verdict = verdict_of(run)
    assert verdict.slow_ranks == {1}, verdict.lines()
    probe = straggler_checks(verdict)["straggler.probe_matmul_tflops"]
    assert probe.status is Status.FAIL and "even its best of 5 slices, 0.0933, is slower than the reference" in \
        probe.message, probe.message


def test_a_node_slow_beyond_its_spread_on_both_signals_is_named_alone():
    """The local cluster's slowed node: every slice of both the probe and the compute window at half speed."""
    run = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                             r0=cpu_rank((0.1, 0.097, 0.104), (170.0, 166.0, 175.0)),
                             r1=cpu_rank((0.05, 0.046, 0.055), (350.0, 330.0, 372.0)))), "nanogpt", 2)
    verdict = verdict_of(run)
    assert not verdict.passed and verdict.slow_ranks == {1}
    probe = straggler_checks(verdict)["straggler.probe_matmul_tflops"]
    assert probe.status is Status.FAIL and probe.message.startswith(
        "straggler: node node-1 (rank 1, pod nanogpt-worker-1): probe_matmul_tflops 0.05 TFLOP/s vs reference "), \
        probe.message
    assert "even its best of 5 slices, 0.055, is slower than the reference; compute_ms_per_step 350 ms (threshold " \
           "307.1) agrees)" in probe.message
    assert "node-0" not in probe.message.split("[")[0]


def test_nodes_sharing_one_kernel_say_so_in_every_straggler_check():
    run = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                             r0=cpu_rank((0.1, 0.097, 0.104), (170.0, 166.0, 175.0)),
                             r1=cpu_rank((0.1, 0.096, 0.103), (171.0, 167.0, 176.0)))), "nanogpt", 2)
    checks = straggler_checks(verdict_of(run))
    note = "[nodes node-0, node-1 share one host's CPUs (one kernel, host_boot_id)"
    assert all(note in c.message for c in checks.values()), [c.message for c in checks.values()]
    other_hosts = Run(log_of(records(2, "nanogpt", gpus_per_node=1,
                                     r0=cpu_rank((0.1, 0.097, 0.104), (170.0, 166.0, 175.0)),
                                     r1=cpu_rank((0.1, 0.096, 0.103), (171.0, 167.0, 176.0), host="boot-b"))),
                      "nanogpt", 2)
    assert not any("share one host" in c.message for c in straggler_checks(verdict_of(other_hosts)).values())


def test_the_transfer_probe_names_a_node_without_the_compute_signals():
    """A degraded PCIe link slows host-to-device copies, not the matmul: probe_h2d_gbps stands alone."""
    slow_link = spread("probe_h2d_gbps", 12.0, 11.0, 13.0)
    healthy = {f"r{r}": spread("probe_h2d_gbps", 50.0, 49.0, 51.0) for r in range(3)}
    verdict = verdict_of(Run(log_of(records(4, **healthy, r3=slow_link)), world_size=4))
    h2d = straggler_checks(verdict)["straggler.probe_h2d_gbps"]
    assert h2d.status is Status.FAIL and h2d.message.startswith("straggler: node node-3 (rank 3"), h2d.message
    assert "agrees" not in h2d.message and verdict.slow_ranks == {3}


def test_a_throughput_straggler_needs_the_compute_signals_to_agree():
    """Synchronous training evens out throughput: a rank slow there only is not named (its compute is fine)."""
    verdict = verdict_of(Run(log_of(records(16, gpus_per_node=8, r13={"throughput": 40.0})), world_size=16))
    assert verdict.passed, verdict.lines()
    assert "its probe_matmul_tflops (251 TFLOP/s, threshold 176.6) does not agree" in straggler_checks(verdict)[
        "straggler.throughput"].message


def test_no_multi_node_floor_without_a_source_a_user_can_check():
    """The p5 two-node floor once rested on a note no user could check (issue 43): none is published, so
    the check does not apply and says how to get one (the cluster's own baseline, or NCCL_TESTS_MIN_BW)."""
    verdict = verdict_of(Run(nccl_table(300.0, 16, tag=True), node_type="p5.48xlarge", busbw=("all_reduce_perf", 2)))
    floor = next(c for c in verdict.checks if c.name == "busbw.floor")
    assert floor.status is Status.NOT_APPLICABLE and "BASELINE" in floor.message, floor.message


def test_an_informational_check_is_recorded_and_decides_nothing():
    failing = Check.failed("busbw.floor", "threshold: 300 GB/s, expected >= 414", measured=300.0, threshold=True)
    verdict = Verdict([Check.passed("ranks", "ok"), failing.informational("upstream judges none")])
    assert verdict.passed and not verdict.failures
    (info,) = [c for c in verdict.checks if c.name == "busbw.floor"]
    assert info.status is Status.INFORMATIONAL and info.measured == 300.0 and not info.threshold
    assert verdict.properties()["check.busbw.floor"] == ("informational: upstream judges none; "
                                                         "it would fail: threshold: 300 GB/s, expected >= 414")
    assert "informational: busbw.floor" in verdict.summary()
