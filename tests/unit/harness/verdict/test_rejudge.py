"""`python -m harness.verdict` from outside (a subprocess, as a CI user re-judging a run would)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ...crafted_logs import metrics_record, nccl_table, training_log


def verdict(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.verdict", *map(str, args)], capture_output=True, text=True,
                          check=False, timeout=60)


def test_a_healthy_upstream_log_passes_with_every_check_printed(fixtures):
    done = verdict("--test", "TestBertTraining", "--world-size", "32", "--node-type", "p3.16xlarge",
                   fixtures / "bert-mpirun-32ranks.log")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "PASS           ranks: all 32 ranks reported once" in lines
    assert "NOT-APPLICABLE loss: the upstream BERT log prints no loss" in lines
    assert "NOT-APPLICABLE device: the accelerator is not known (ACCELERATOR)" in lines
    assert lines[-1].startswith("PASS: 13 checks ran; passed: parse, workload, ranks")


def test_other_thresholds_fail_it_with_the_failing_checks_message(fixtures):
    done = verdict("--test", "TestBertTraining", "--world-size", "32", "--min-throughput-per-gpu", "12",
                   fixtures / "bert-mpirun-32ranks.log")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == ("FAIL: threshold: throughput on rank 2 (pod ?, node ?) is 9.86 samples/s, "
                                            "expected >= 12 samples/s (margin 0.82x; floor from the setting: "
                                            "MIN_THROUGHPUT_PER_GPU)")


def test_a_foreign_workloads_logs_fail(fixtures):
    done = verdict("--test", "TestNanoGPTTraining", "--world-size", "32", fixtures / "bert-mpirun-32ranks.log")
    assert done.returncode == 1
    assert "FAIL: workload: the logs hold bert metrics" in done.stdout


def test_bandwidth_tests_are_judged_at_the_largest_size():
    canned = Path("localcluster/emulation/canned_logs/nccl-tests-16gpus-efa.log")
    done = verdict("--test", "TestNCCLTests/single-node", "--node-type", "p4d.24xlarge", canned)
    assert done.returncode == 1 and "bus bandwidth at 16 GiB" in done.stdout
    done = verdict("--test", "TestMPIJobPytorchTraining/multi-node:all_reduce_perf", "--node-type", "p4d.24xlarge",
                   "--nodes", "2", canned)
    assert done.returncode == 0, done.stdout


def test_an_artifacts_folder_gives_the_logs_and_the_defaults(tmp_path):
    folder = tmp_path / "artifacts" / "e2e-nvidia-training" / "TestBertTraining"
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "bert-training-0.log").write_text("=== pod bert-training-0 | node n0 | container worker\n"
                                                         + training_log(16))
    (folder / "logs" / "bert-training-0.previous.log").write_text("garbage that must not be read\n")
    (folder / "result.json").write_text(json.dumps({
        "config": {"node_type": {"value": "p4d.24xlarge"}, "node_count": {"value": "2"}},
        "metrics": {"world_size": 16, "ranks": [{"rank": 0, "pod": "bert-training-0", "node": "n0"}]}}))
    done = verdict("--test", "TestBertTraining", tmp_path / "artifacts")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node type p4d.24xlarge" in done.stdout.splitlines()[0]
    done = verdict("--test", "TestBertTraining", "--world-size", "8", folder)
    assert done.returncode == 1 and "ranks outside 0..7 reported: 8-15" in done.stdout


def test_a_run_with_a_slow_node_names_it(tmp_path):
    log = tmp_path / "slow.log"
    # Slow on both compute signals (the probe and the compute window): they must agree to name a node.
    slowed = [line.replace('"probe_matmul_tflops":25', '"probe_matmul_tflops":10')
              .replace('"compute_ms_per_step":14', '"compute_ms_per_step":44')
              if '"node":"node-1"' in line else line for line in training_log(16).splitlines()]
    log.write_text("\n".join(slowed) + "\n")
    done = verdict("--test", "TestBertTraining", "--world-size", "16", log)
    assert done.returncode == 1
    assert "FAIL: straggler: node node-1 (ranks 8-15, pod bert-worker-1): probe_matmul_tflops median" in done.stdout


@pytest.mark.parametrize(("args", "error"), [
    (["--test", "TestNope", "--world-size", "2", "x.log"], "--test=TestNope: not a test this tool judges"),
    (["--test", "TestBertTraining", "nowhere.log"], "nowhere.log: no such file or folder"),
    (["--test", "TestBertTraining", "PATH_OF_LOG"], "--world-size: how many ranks the job ran"),
    (["--test", "TestNCCLTests/multi-node", "PATH_OF_LOG"], "--nodes: how many nodes the sweep spanned"),
    (["--world-size", "2", "x.log"], "the following arguments are required: --test"),
    (["--test", "TestBertTraining", "--straggler-fraction", "2", "x.log"], "argument --straggler-fraction"),
])
def test_usage_errors_exit_2_naming_what_is_wrong(tmp_path, args, error):
    log = tmp_path / "x.log"
    log.write_text(nccl_table(100.0, 8, max_bytes=1 << 20) + "KT2T_METRICS " + json.dumps(metrics_record(0, 2)) + "\n")
    done = verdict(*[str(log) if a in ("x.log", "PATH_OF_LOG") else a for a in args])
    assert done.returncode == 2, done.stdout + done.stderr
    assert error in done.stderr


def test_a_log_without_metrics_fails(fixtures):
    done = verdict("--test", "TestBertTraining", "--world-size", "32", fixtures / "bert-mpirun-missing-env.log")
    assert done.returncode == 1 and "no known metric format" in done.stderr
