"""Upstream's GPU node checks (issue 44) run for real in a container on the local cluster's real nodes,
which have no GPU: the script the suites ship (manifests/scripts/) runs in a pod on real-cpu-0, fails
on the assertion a node without the NVIDIA driver must fail, with upstream's exit code, and the
harness's node verdict (harness/verdict/node_checks.py) names the node from that real log.

The GPU path itself is only canned here (tests/integration/dropin/test_gpu_node_suites.py): this
proves the scripts and the verdict on a real kubelet and containerd, not on a GPU.
"""

from __future__ import annotations

import pytest

from harness.cluster.manifests import script_text
from harness.verdict.checks import Status
from harness.verdict.node_checks import NodeLog, judge_node_checks
from testbins.nvidia_node.device_nodes import DEVICE_NODES
from testbins.nvidia_node.driver_liveness import DRIVER_LIVENESS

from ..conftest import LocalCluster, real_node_names
from .test_real_nodes import pod, run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

# (check, the assertion a node without a driver fails, upstream's exit code for it)
WITHOUT_A_DRIVER = [(DEVICE_NODES, "FAIL 7.3: nvidia-smi reports no GPU", 31),
                    (DRIVER_LIVENESS, "FAIL 1.1: nvidia-smi -L exited non-zero", 10)]


@pytest.mark.parametrize(("check", "assertion", "exit_code"), WITHOUT_A_DRIVER, ids=lambda v: getattr(v, "check", ""))
def test_a_node_check_run_on_a_node_without_a_gpu_fails_naming_it(real_nodes: LocalCluster, namespace: str,
                                                                   check, assertion: str, exit_code: int):
    node = real_node_names(real_nodes)[0]
    name = check.job_name[:50]
    phase, log = run_to_end(real_nodes, namespace, pod(name, node, script_text(check.script)))
    assert phase == "Failed", log
    status = real_nodes.core.read_namespaced_pod(name, namespace).status.container_statuses[0]
    assert status.state.terminated.exit_code == exit_code, (status.state.terminated, log)
    assert assertion in log, log
    verdict = judge_node_checks(check.kind, [NodeLog(node, tuple(log.splitlines()))], (node,), check.done_line)
    (judged,) = verdict.checks
    assert judged.status is Status.FAIL and judged.message.startswith(f"{check.check} on node {node}: FAIL "), \
        judged.message
