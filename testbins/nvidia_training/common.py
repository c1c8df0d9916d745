"""What the suite's tests share: each workload's size (WORKLOAD_SIZE), and the one assessment of a
training test (the Job succeeds, its metrics judged)."""

from __future__ import annotations

from harness.config.settings import Config
from harness.framework.context import TestContext
from harness.jobs.assessment import assess
from harness.jobs.job import Job

# Each workload's size names for WORKLOAD_SIZE (harness.config.settings.WORKLOAD_SIZES): tiny / base / large,
# and GPT-2's larger sizes, which are nanoGPT's own and leave the other workloads at their large size.
GPT2_SIZES = ("gpt2-medium", "gpt2-large", "gpt2-xl")
SIZES = {
    "bert": {"tiny": "tiny", "base": "base", "large": "large"} | dict.fromkeys(GPT2_SIZES, "large"),
    "nanogpt": {"tiny": "tiny", "base": "small", "large": "gpt2"} | {size: size for size in GPT2_SIZES},
    "mnist": {"tiny": "tiny", "base": "full", "large": "full"} | dict.fromkeys(GPT2_SIZES, "full"),
}


def workload_size(cfg: Config, workload: str) -> str:
    """WORKLOAD_SIZE, else tiny on CPU clusters and with -test.short, base (the upstream BERT shape)
    on GPUs."""
    size = cfg.workload_size or ("tiny" if cfg.accelerator == "cpu" or cfg.test_short else "base")
    return SIZES[workload][size]


def succeeded_and_assessed(t: TestContext, job: Job, workload: str) -> None:
    """The one assessment of a training test: the Job succeeds, then its metrics are judged."""
    job.wait_succeeded()
    assess(t, job, workload)
