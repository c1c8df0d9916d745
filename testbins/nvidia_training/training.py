"""TestNanoGPTTraining and TestMNISTTraining (this project's): a workload trained across the nodes, judged."""

from __future__ import annotations

from harness.framework.context import TestContext
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from testbins.nvidia_training.common import succeeded_and_assessed, workload_size


def test_nanogpt_training(t: TestContext) -> None:
    """A GPT (nanoGPT-style) with DDP and gradient accumulation; MFU reported where the GPU is known."""
    # torch.compile pays off on GPUs (fused kernels, MFU); on CPU it only adds compile time.
    compile_flag = ("--compile",) if t.cfg.accelerator == "nvidia" else ()
    job = launch(t, Workload("nanogpt-training", "workloads.nanogpt",
                             ("--size", workload_size(t.cfg, "nanogpt"), *compile_flag)))
    t.assessment("training succeeds", lambda: succeeded_and_assessed(t, job, "nanogpt"))


def test_mnist_training(t: TestContext) -> None:
    """The SMDDP MNIST CNN with Lightning's DDPStrategy (nccl on GPU, gloo on CPU)."""
    job = launch(t, Workload("mnist-training", "workloads.mnist", ("--size", workload_size(t.cfg, "mnist"))))
    t.assessment("training succeeds", lambda: succeeded_and_assessed(t, job, "mnist"))
