"""What the suite's tests share (upstream's main_test.go keeps its shared helpers beside TestMain):
the GPU requirement, the nccl-tests folder, a log's first matching line."""

from __future__ import annotations

import re

from harness.framework.context import TestContext
from harness.jobs.job import Job
from harness.metrics.records import read_lines

NCCL_TESTS_DIR = "/opt/nccl-tests/build"


def require_gpus(t: TestContext) -> None:
    if t.cfg.accelerator == "cpu":
        t.skip(f"{t.name} needs NVIDIA GPUs (ACCELERATOR=cpu)")


def first_match(job: Job, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The first line of the job's logs (current instances) matching `pattern`."""
    for entry in job.capture_logs():
        if entry.previous or not entry.path.exists():
            continue
        for line in read_lines(entry.path):
            match = pattern.search(line)
            if match:
                return match
    return None

