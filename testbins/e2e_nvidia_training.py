"""e2e-nvidia-training (also installed as nvidia-training.test): multi-node training suites, upstream
aws-k8s-tester's TestBertTraining (feature bert-training) among them.

This module only declares the suite: its tests, in this order, with their features, labels and
assessments. Each test's code is in testbins/nvidia_training/ (its docstring maps the modules).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.jobs.assessment import ASSESSED_TRAINING
from harness.runner import main as run_suite
from testbins.nvidia_training import bert, elastic, training

SUITE = Suite("e2e-nvidia-training", "Multi-node training on a Kubernetes cluster: each test launches a workload "
              "across the configured nodes (torchrun, MPI or a Kubeflow TrainJob), waits failing fast, and checks "
              "its metrics.",
              aliases=("nvidia-training.test",))

# The settings that change every training test, besides those of its checks (docs/TESTS.md).
TRAINING_SETTINGS = ("LAUNCHER", "TRAINING_IMAGE", "WORKLOAD_SIZE", "ACCELERATOR", "GPUS_PER_NODE", "NODE_COUNT",
                     "--test.short")

SUITE.test("TestBertTraining", upstream=True, feature="bert-training", labels=GPU,
           assessments=("BERT training Job succeeds",), checks=ASSESSED_TRAINING,
           launches="BERT pretraining (`python -m workloads.bert`, or the image's `python train.py` in upstream's "
           "image) on every GPU of every node, as a torchrun Job, an MPIJob or a TrainJob",
           settings=(*TRAINING_SETTINGS, "BERT_TRAINING_IMAGE", "TRAINING_COMMAND"))(bert.test_bert_training)
SUITE.test("TestNanoGPTTraining", labels=GPU, assessments=("training succeeds",), checks=ASSESSED_TRAINING,
           launches="a nanoGPT-style GPT (`python -m workloads.nanogpt`, `--compile` on GPUs) with DDP on every GPU",
           settings=TRAINING_SETTINGS)(training.test_nanogpt_training)
SUITE.test("TestMNISTTraining", labels=GPU, assessments=("training succeeds",), checks=ASSESSED_TRAINING,
           launches="the SMDDP MNIST CNN under Lightning's DDPStrategy (`python -m workloads.mnist`) on every GPU",
           settings=TRAINING_SETTINGS)(training.test_mnist_training)
SUITE.test("TestElasticRecovery", labels=GPU, assessments=("training resumes",), checks=ASSESSED_TRAINING,
           launches="nanoGPT with checkpoints every 5 steps (torchrun's c10d rendezvous or a TrainJob with a JobSet "
           "failure policy); a worker pod is deleted mid-run and the ranks must resume from the checkpoint (the "
           "test fails when none resumed; the time from the deletion to rank 0's first step after the resume is "
           "recorded as the property `elastic.recovery_seconds`, not judged)",
           settings=TRAINING_SETTINGS)(elastic.test_elastic_recovery)

def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
