"""What the GPU node suites share: a check script run in a per-node Job (or a DaemonSet), each
node's log judged (harness/verdict/node_checks.py), the node named on a failure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.cluster.manifests import script_text
from harness.cluster.pods import node_of, phase_of
from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image
from harness.jobs.job import Job, launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from harness.verdict.checks import CheckKind, Verdict
from harness.verdict.node_checks import NodeLog, declare_node_check, judge_node_checks
from testbins.nvidia.common import require_gpus

# upstream's pods run with these capabilities of the driver (compute for CUDA, utility for nvidia-smi).
COMPUTE_UTILITY = {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
# upstream's /host/proc: what the GSP and fabric-manager checks read of the node.
HOST_PROC = {"/host/proc": "/proc"}


@dataclass(frozen=True)
class NodeCheck:
    """A script of manifests/scripts/ that checks a node and the line it ends with when all passed."""

    check: str  # the verdict's check name (`<check>.<node>`)
    job_name: str  # upstream's pod (or Job) name
    script: str
    done_line: str
    env: Mapping[str, str] = field(default_factory=dict)
    host_paths: Mapping[str, str] = field(default_factory=dict)
    # `<check>.<node>`, declared here, once for each script (the catalogue lists it).
    kind: CheckKind = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", declare_node_check(self.check, self.script))

    def workload(self, test_image: str, *, nodes: int | None = None, gpus: int | None = None,
                 env: Mapping[str, str] | None = None) -> Workload:
        """A per-node Job on `nodes` nodes of the run (None: every node), its pods asking for `gpus`
        GPUs (None: all their node's)."""
        return Workload(self.job_name, binary="/bin/bash", args=("-c", script_text(self.script)), image=test_image,
                        launcher="per-node", nodes=nodes, gpus=gpus,
                        extra_env={**COMPUTE_UTILITY, **self.env, **(env or {})}, host_paths=self.host_paths)


def node_verdict(t: TestContext, job: Job, check: NodeCheck) -> Verdict:
    """Every node of the job judged on its log (harness/verdict/node_checks.py): a node whose pod
    failed (upstream's verdict) is named with why; a log that fails where the pod succeeded is beyond
    upstream's criterion, informational unless JUDGE_STRICT."""
    logs = [NodeLog(entry.node, tuple(read_lines(entry.path))) for entry in job.capture_logs()
            if not entry.previous and entry.path.exists()]
    failed_on = {node_of(pod) for pod in job.pods_seen.values() if phase_of(pod) == "Failed"}
    return judge_node_checks(check.kind, logs, job.placement.node_names, check.done_line, pods_failed_on=failed_on,
                             test=t.name, strict=t.cfg.judge_strict)


def judge_check(t: TestContext, job: Job, check: NodeCheck) -> None:
    """upstream's verdict: the job succeeds. Each node's log says why a node failed (naming the node and
    the assertion) and, where every pod succeeded, what its script asserted (deciding with JUDGE_STRICT)."""
    try:
        job.wait_succeeded()
    except TestFailure:
        verdict = node_verdict(t, job, check)
        if not verdict.passed:
            record_verdict(t, verdict)  # raises, naming the node and the assertion it failed
        raise
    record_verdict(t, node_verdict(t, job, check))


def run_check(t: TestContext, check: NodeCheck, assessment: str, *, test_image: str | None = None,
              nodes: int | None = None, gpus: int | None = None, env: Mapping[str, str] | None = None) -> None:
    """Launch the check (the feature's setup), in --nvidiaTestImage unless `test_image`, and judge it
    in upstream's assessment."""
    require_gpus(t)
    workload = check.workload(test_image or image(t, "nccl_tests_image"), nodes=nodes, gpus=gpus, env=env)
    job = launch(t, workload)
    t.assessment(assessment, lambda: judge_check(t, job, check))
