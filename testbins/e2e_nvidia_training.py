"""e2e-nvidia-training (also installed as nvidia-training.test): multi-node training suites, upstream
aws-k8s-tester's TestBertTraining (feature bert-training) among them.

This module only declares the suite: its tests, in this order, with their features, labels and
assessments. Each test's code is in testbins/nvidia_training/ (its docstring maps the modules).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_training import bert, elastic, training

SUITE = Suite("e2e-nvidia-training", "Multi-node training on a Kubernetes cluster: each test launches a workload "
              "across the configured nodes (torchrun, MPI or a Kubeflow TrainJob), waits failing fast, and checks "
              "its metrics.",
              aliases=("nvidia-training.test",))

SUITE.test("TestBertTraining", upstream=True, feature="bert-training", labels=GPU,
           assessments=("BERT training Job succeeds",))(bert.test_bert_training)
SUITE.test("TestNanoGPTTraining", labels=GPU, assessments=("training succeeds",))(training.test_nanogpt_training)
SUITE.test("TestMNISTTraining", labels=GPU, assessments=("training succeeds",))(training.test_mnist_training)
SUITE.test("TestElasticRecovery", labels=GPU, assessments=("training resumes",))(elastic.test_elastic_recovery)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
