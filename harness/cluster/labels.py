"""The labels every object the suites create carries (managed-by, run id, test, job), and how a
value is made a valid label value."""

from __future__ import annotations

import re

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubetest2-training"
RUN_ID_LABEL = "kubetest2-training/run-id"
TEST_LABEL = "kubetest2-training/test"
# On a job's pods: which job they belong to (a test may run several).
JOB_LABEL = "kubetest2-training/job"


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    return re.sub(r"[^A-Za-z0-9._-]", ".", text)[:63].strip("._-") or "x"


def base_labels(run_id: str, test_name: str) -> dict[str, str]:
    """The labels of a test's namespace and of every object in it."""
    return {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: label_value(run_id), TEST_LABEL: label_value(test_name)}


def job_labels(base: dict[str, str], job_name: str) -> dict[str, str]:
    """A job's objects: the test's labels and the job's own."""
    return {**base, JOB_LABEL: label_value(job_name)}


def job_selector(job_name: str) -> str:
    """The label selector of a job's pods."""
    return f"{JOB_LABEL}={label_value(job_name)}"
