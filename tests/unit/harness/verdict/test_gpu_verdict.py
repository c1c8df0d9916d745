"""ACCELERATOR=nvidia: the verdict checks every rank's device and GPU count on the canned GPU logs
(localcluster/emulation/canned_logs, 2 nodes x 8 ranks), the new metric keys parse strictly, upstream BERT's lines
make the checks not-applicable, and a pod whose workload found no usable GPU fails naming its line,
pod and node."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.logs import CapturedLog
from harness.jobs.no_gpu import NO_GPU_MARKERS, explain_no_gpu
from harness.metrics.records import combine, scan_lines
from harness.verdict.checks import Status
from harness.verdict.training import WORKLOADS, Expectation, check_device, check_gpus, judge_training

REPO = Path(__file__).resolve().parents[4]
CANNED = REPO / "localcluster" / "emulation" / "canned_logs"
MARKER = "KT2T_METRICS "


def canned_lines(workload: str = "nanogpt", shape: str = "p5", edit: Any = None) -> list[list[str]]:
    """The two pods' canned logs, each KT2T_METRICS record passed through `edit(record)`."""
    logs = []
    for index in (0, 1):
        lines = []
        for text in (CANNED / f"{workload}-{shape}-healthy-{index}.log").read_text().splitlines():
            if text.startswith(MARKER) and edit is not None:
                record = json.loads(text[len(MARKER):])
                edit(record)
                lines.append(MARKER + json.dumps(record, separators=(",", ":")))
            else:
                lines.append(text)
        logs.append(lines)
    return logs


def judged(logs: list[list[str]], accelerator: str | None = "nvidia", per_node: int | None = 8,
           workload: str = "nanogpt"):
    metrics = combine([scan_lines(lines, f"pod-{i}.log") for i, lines in enumerate(logs)])
    expect = Expectation("TestX", WORKLOADS[workload], 16, "p5.48xlarge", accelerator=accelerator,
                         processes_per_node=per_node)
    return metrics, expect, judge_training(metrics, expect)


def check(verdict, name: str):
    return next(c for c in verdict.checks if c.name == name)


@pytest.mark.parametrize("workload", ["nanogpt", "bert", "mnist"])
def test_healthy_gpu_logs_pass_the_device_and_gpu_checks(workload):
    _, _, verdict = judged(canned_lines(workload), workload=workload)
    assert check(verdict, "device").status is Status.PASS, check(verdict, "device").message
    assert check(verdict, "gpus").status is Status.PASS, check(verdict, "gpus").message


def test_a_node_training_on_cpu_fails_naming_its_ranks_node_and_pod():
    def on_cpu(record):
        if record["node"] == "kwok-p5-1":
            record.update(device="cpu", backend="gloo", device_requested="auto", gpus_visible=0)
    _, _, verdict = judged(canned_lines(edit=on_cpu))
    device = check(verdict, "device")
    assert device.status is Status.FAIL
    assert "device cpu instead of cuda:<local_rank> on ranks 8-15 (node kwok-p5-1; pod nanogpt-training-1)" \
        in device.message, device.message
    assert "backend gloo, expected nccl on ranks 8-15" in device.message
    assert "device_requested auto, expected cuda" in device.message
    assert "kwok-p5-0" not in device.message
    gpus = check(verdict, "gpus")
    assert gpus.status is Status.FAIL and "0 GPUs visible for 8 processes on the node on ranks 8-15" in gpus.message
    assert not verdict.passed


def test_a_rank_on_another_ranks_gpu_fails():
    def swapped(record):
        if record["rank"] == 3:
            record["device"] = "cuda:0"
    device = check(judged(canned_lines(edit=swapped))[2], "device")
    assert device.status is Status.FAIL and "device cuda:0 instead of cuda:<local_rank> on ranks 3 " in device.message


def test_gpus_per_node_must_be_what_the_harness_launched():
    gpus = check(judged(canned_lines(), per_node=4)[2], "gpus")
    assert gpus.status is Status.FAIL
    assert "gpus_per_node 8, the harness launched 4 per node on ranks 0-15 (nodes kwok-p5-0, kwok-p5-1" \
        in gpus.message, gpus.message


def test_not_applicable_on_cpu_without_an_accelerator_and_for_upstream_bert():
    for accelerator, reason in (("cpu", "ACCELERATOR=cpu: no GPU expected"), (None, "accelerator is not known")):
        verdict = judged(canned_lines(), accelerator=accelerator)[2]
        for name in ("device", "gpus"):
            assert check(verdict, name).status is Status.NOT_APPLICABLE
            assert reason in check(verdict, name).message
    bert = [f"Process {rank} - Throughput: 100.0 samples/second" for rank in range(2)]
    metrics = combine([scan_lines(bert, "bert.log")])
    expect = Expectation("TestBertTraining", WORKLOADS["bert"], 2, None, accelerator="nvidia", processes_per_node=1)
    for result in (check_device(metrics, expect), check_gpus(metrics, expect)):
        assert result.status is Status.NOT_APPLICABLE
        assert "upstream BERT 'Process N' lines carry no device fields" in result.message


@pytest.mark.parametrize(("key", "bad"), [("gpus_visible", 8.0), ("gpus_visible", "8"), ("gpus_per_node", -1),
                                          ("local_world_size", 0), ("local_world_size", True),
                                          ("compute_steps", 1.5), ("device_requested", 1), ("gpu_name", 7)])
def test_the_new_keys_parse_strictly(key, bad):
    def malformed(record):
        if record["rank"] == 5:
            record[key] = bad
    metrics = combine([scan_lines(lines, f"pod-{i}.log") for i, lines in enumerate(canned_lines(edit=malformed))])
    assert metrics.problems and f"KT2T_METRICS: {key}:" in str(metrics.problems[0]), metrics.problems
    rank5 = next(r for r in metrics.ranks if r.rank == 5)
    assert key not in rank5.values


def test_the_no_gpu_markers_are_the_workloads_own_words():
    source = (REPO / "workloads" / "distributed.py").read_text()
    flat = re.sub(r'"\s*\n\s*f?"', "", source)  # join implicitly concatenated string literals
    for marker in NO_GPU_MARKERS:
        assert marker in flat, marker


def test_a_pod_without_a_usable_gpu_fails_naming_the_line_pod_and_node(tmp_path):
    def log(name: str, text: str) -> CapturedLog:
        path = tmp_path / f"{name}.log"
        path.write_text(f"=== pod {name}\n{text}")
        return CapturedLog(name, f"node-of-{name}", "worker", path, path.stat().st_size)
    line = ("workloads.nanogpt: CUDA is required (ACCELERATOR=nvidia or --device cuda) but "
            "torch.cuda.is_available() is False (torch 2.9.0, CUDA 12.8; CUDA_VISIBLE_DEVICES unset)")
    logs = [log("nanogpt-training-0", "starting\n" + line + "\nE0101 torchrun failed\n"),
            log("nanogpt-training-1", "starting\n")]
    message = explain_no_gpu("pod nanogpt-training-0 failed", logs, "nanogpt-training-0")
    assert message is not None
    assert message.startswith("pod nanogpt-training-0 failed: no usable GPU: pod nanogpt-training-0 on node "
                              "node-of-nanogpt-training-0 says: ")
    assert "CUDA is required" in message and "torch.cuda.is_available() is False" in message
    for other in ("2 nodes x 8 need 8 GPUs but torch.cuda.device_count() is 4", "LOCAL_RANK=7 has no GPU",
                  "LOCAL_RANK=1: GPU cuda:1 is visible but unusable: CUDA error"):
        assert "says" in (explain_no_gpu("x", [log("p", other + "\n")], "p") or "")
    assert explain_no_gpu("pod failed", [logs[1]], "nanogpt-training-1") is None
