"""TestDriverLiveness (upstream's test/cases/nvidia-driver-liveness)."""

from __future__ import annotations

from harness.framework.context import TestContext
from harness.verdict import thresholds
from testbins.nvidia_node.common import NodeCheck, run_check

DRIVER_LIVENESS = NodeCheck("driver_liveness", "nvidia-driver-liveness-check", "driver-liveness-check.sh",
                            "=== all driver-liveness checks passed ===")


def expected_gpu_name(node_type: str) -> str:
    """The GPU model the instance type should have (upstream asks ec2:DescribeInstanceTypes; here the
    hardware table, harness/verdict/thresholds.yaml); "" where the type is not in it: 1.8 skips, as
    upstream's does when its lookup fails."""
    return thresholds.node_type(node_type).gpu or ""


def test_driver_liveness(t: TestContext) -> None:
    """One pod with a GPU: nvidia-smi answers (1.1), every GPU reports the driver branch of
    --expectedDriverVersion (1.5, skipped when unset) and the instance type's GPU model (1.8)."""
    env = {"EXPECTED_DRIVER_VERSION": t.cfg.expected_driver_version or "",
           "EXPECTED_GPU_NAME": expected_gpu_name(t.topology.node_type)}
    run_check(t, DRIVER_LIVENESS, "pod reaches Succeeded", nodes=1, gpus=1, env=env)
