"""TestBertInference (upstream's test/cases/nvidia-inference)."""

from __future__ import annotations

from harness.config.topology import GPU_RESOURCE
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.jobs.images import image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from testbins.nvidia.common import require_gpus


def test_bert_inference(t: TestContext) -> None:
    """upstream's BERT inference Job: `python infer.py` of --bertInferenceImage with INFERENCE_MODE
    (--inferenceMode) on --gpuRequested GPUs of one node, which must have that many; the Job must
    succeed within JOB_TIMEOUT (upstream's 20 minutes)."""
    require_gpus(t)
    if not t.cfg.bert_inference_image:
        raise TestFailure("--bertInferenceImage (or BERT_INFERENCE_IMAGE) must be set: TestBertInference runs "
                          "that image's `python infer.py`, as upstream's")
    wanted = t.cfg.gpu_requested
    able = [node.name for node in t.topology.nodes if node.capacity_of(GPU_RESOURCE) >= wanted]
    if not able:
        raise TestFailure(f"no node has >= {wanted} GPU(s) (--gpuRequested): "
                          + ", ".join(f"{n.name} has {n.capacity_of(GPU_RESOURCE)}" for n in t.topology.nodes))
    job = launch(t, Workload("bert-inference", binary="python", args=("infer.py",),
                             image=image(t, "bert_inference_image"), launcher="per-node", on_nodes=(able[0],),
                             gpus=wanted, extra_env={"INFERENCE_MODE": t.cfg.inference_mode}))
    t.assessment("BERT inference Job succeeds", job.wait_succeeded)
