"""TestContainerdConfig (upstream's containerd_test.go)."""

from __future__ import annotations

from harness.cluster.manifests import script_text
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from testbins.nvidia.common import require_gpus

# upstream's daemonset-containerd-check.yaml, its script verbatim in manifests/scripts/containerd-check.sh.
CONTAINERD_CHECK_IMAGE = "public.ecr.aws/amazonlinux/amazonlinux:latest"
CONTAINERD_PASSED = "containerd config check PASSED."
CONTAINERD_SCRIPT = script_text("containerd-check.sh")


def test_containerd_config(t: TestContext) -> None:
    """A DaemonSet reads each node's /etc/containerd/config.toml; it must be Ready on every node and
    each pod must say the check passed (a failing check crash-loops: the test fails at once)."""
    require_gpus(t)
    job = launch(t, Workload("containerd-check", binary="sh", args=("-c", CONTAINERD_SCRIPT),
                             image=CONTAINERD_CHECK_IMAGE, launcher="daemonset",
                             host_paths={"/host-etc/containerd": "/etc/containerd"}))

    def ready_and_passed() -> None:
        job.wait_succeeded()
        silent = [entry.pod for entry in job.capture_logs() if not entry.previous
                  and not any(CONTAINERD_PASSED in line for line in read_lines(entry.path))]
        if silent:
            raise TestFailure(f"containerd-config-check: no '{CONTAINERD_PASSED}' in the log of {', '.join(silent)}")

    t.assessment("DaemonSet becomes ready", ready_and_passed)


