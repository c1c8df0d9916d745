"""e2e-nvidia-training: multi-node training suites (drop-in for the upstream Go binary)."""

from __future__ import annotations

import sys

from harness.config import Config
from harness.jobs import Workload, launch
from harness.runner import Suite
from harness.runner import main as run_suite
from harness.testing import TestCase, TestContext
from harness.verdict import (
    check_all_ranks_reported,
    check_loss_decreased,
    check_minimum,
    check_stragglers,
    thresholds_for,
)


def workload_size(cfg: Config) -> str:
    """WORKLOAD_SIZE, else tiny on CPU clusters and base (the upstream BERT shape) on GPUs."""
    return cfg.workload_size or ("tiny" if cfg.accelerator == "cpu" else "base")


def test_bert_training(t: TestContext) -> None:
    """BERT pretraining (MLM + NSP) across every node and GPU; throughput checked per rank."""
    job = launch(t, Workload("bert-training", "workloads.bert", ("--size", workload_size(t.cfg))))
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    check_all_ranks_reported(metrics, job.world_size)
    check_loss_decreased(metrics)
    check_stragglers(metrics, "throughput", t.cfg.straggler_fraction, "samples/s")
    if t.cfg.min_throughput_per_gpu is not None:
        minimum, source = t.cfg.min_throughput_per_gpu, "MIN_THROUGHPUT_PER_GPU"
    else:
        minimum, source = thresholds_for(t.cfg.node_type).bert_samples_per_gpu, f"{t.cfg.node_type} table"
    check_minimum(metrics, "throughput", minimum, "samples/s", source)


SUITE = Suite(
    binary="e2e-nvidia-training",
    summary="Multi-node training on a Kubernetes cluster: each test launches a workload across the "
            "configured nodes (torchrun or MPI), waits failing fast, and checks its metrics.",
    tests=(
        TestCase("TestBertTraining", test_bert_training),
    ),
)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
