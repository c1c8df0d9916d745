"""e2e-nvidia-inference (also installed as nvidia-inference.test, upstream's name): upstream aws-k8s-tester's
test/cases/nvidia-inference suite under its test, feature and assessment names (TestBertInference;
testbins/nvidia_node/inference.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import inference

SUITE = Suite("e2e-nvidia-inference", (
    "Upstream aws-k8s-tester's nvidia-inference suite: BERT inference on a GPU: upstream's `python "
    "infer.py` of --bertInferenceImage succeeds."
    ), aliases=("nvidia-inference.test",))
SUITE.test("TestBertInference", upstream=True, feature="bert-inference",
           launches="`python infer.py` of `--bertInferenceImage`, one pod with `--gpuRequested` GPUs",
           settings=("BERT_INFERENCE_IMAGE", "INFERENCE_MODE", "GPU_REQUESTED"),
           labels=GPU,
           assessments=("BERT inference Job succeeds",))(
    inference.test_bert_inference)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
