"""Each training workload, tiny, under torchrun with 2 CPU ranks: it really trains, in sync."""

from __future__ import annotations

import math
import re

import pytest
from workload_runs import assert_canned_gpu_logs_have_the_keys_of, assert_harness_parses, assert_trained

pytest.importorskip("torch")

pytestmark = pytest.mark.workloads

ITER_LINE = re.compile(r"^iter (\d+): loss (\d+\.\d{4}), time (\d+\.\d{2})ms, mfu n/a$")


@pytest.mark.timeout(240)
def test_bert_tiny_trains(torchrun, tmp_path):
    run = torchrun("bert", "--size", "tiny")
    # transformers' test config: vocab 99, so MLM ln(99) plus NSP ln(2) at random init.
    metrics = assert_trained(run, "bert", math.log(99) + math.log(2), tolerance=0.15)
    lines = run.stdout.splitlines()
    for rank in (0, 1):
        assert any(re.fullmatch(rf"Process {rank} - Training time: \d+\.\d\d seconds", ln) for ln in lines)
        assert any(re.fullmatch(rf"Process {rank} - Throughput: \d+\.\d\d samples/second", ln) for ln in lines)
    [average] = [ln for ln in lines if ln.startswith("Average Throughput: ")]
    # The true mean over ranks, not rank 0's own value as upstream printed.
    mean = sum(m["throughput"] for m in metrics) / 2
    assert float(average.split()[2]) == pytest.approx(mean, abs=0.01)
    assert all(m["throughput"] > 0 and m["training_time"] > 0 for m in metrics)
    assert_harness_parses(run, tmp_path, "bert")
    assert_canned_gpu_logs_have_the_keys_of(metrics, "bert")


@pytest.mark.timeout(240)
def test_nanogpt_tiny_trains(torchrun, tmp_path):
    run = torchrun("nanogpt", "--size", "tiny")
    # char-level, 65 symbols
    metrics = assert_trained(run, "nanogpt", math.log(65), tolerance=0.1)
    iters = [ITER_LINE.match(ln) for ln in run.stdout.splitlines() if ln.startswith("iter ")]
    assert iters and all(iters), "iter lines must be nanoGPT's format with 'mfu n/a' on CPU"
    assert [int(m.group(1)) for m in iters] == list(range(60))  # rank 0 only, every iteration
    for m in metrics:
        assert m["mfu"] is None  # no peak for a CPU: no made-up number
        assert m["resumed_from_step"] is None
        assert m["iterations"] == 60
        assert m["tokens_per_s"] > 0 and m["ms_per_iter"] > 0
    assert "-100.00%" not in run.stdout
    assert_harness_parses(run, tmp_path, "nanogpt")
    assert_canned_gpu_logs_have_the_keys_of(metrics, "nanogpt")


@pytest.mark.timeout(240)
def test_mnist_lightning_tiny_trains(torchrun, tmp_path):
    run = torchrun("mnist", "--size", "tiny")
    metrics = assert_trained(run, "mnist", math.log(10), tolerance=0.15)
    epochs = re.findall(r"^epoch (\d+): loss (\d+\.\d{4}), accuracy (\d\.\d{4})$", run.stdout, re.MULTILINE)
    assert [int(e[0]) for e in epochs] == [0, 1]
    assert float(epochs[-1][1]) < float(epochs[0][1])
    for m in metrics:
        assert m["accuracy"] > 0.5  # ten classes: chance is 0.1
        assert m["samples_per_s"] > 0
    assert_harness_parses(run, tmp_path, "mnist")
    assert_canned_gpu_logs_have_the_keys_of(metrics, "mnist")
