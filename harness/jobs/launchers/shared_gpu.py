"""shared-gpu: a Job per node of `workload.pods` pods (default: one per GPU of the node) pinned to
it, each asking for one nvidia.com/gpu, all at once (TestTimeSlicing, TestMps: more pods than the
nodes have GPUs, on every node of the type as upstream counts them)."""

from __future__ import annotations

from harness.cluster.conditions import pods_succeeded
from harness.cluster.labels import job_selector
from harness.cluster.resources import JOB
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import JobPerNode, common_fields, container_env
from harness.jobs.workload import Placement, Rendering, Workload


def pod_count(workload: Workload, placement: Placement) -> int:
    return workload.pods if workload.pods is not None else placement.processes_per_node


class SharedGpu(JobPerNode):
    name = "shared-gpu"
    owner = JOB

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        common = common_fields(workload, placement)
        return [Rendering("shared-gpu-job.yaml", {
            **common, "JobName": job_name, "NodeName": node, "Pods": pod_count(workload, placement),
            "Command": workload.program(), "Env": container_env(workload, placement, None)})
            for job_name, node in self.jobs(workload, placement)]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return pods_succeeded(placement.namespace, job_selector(workload.job_name),
                              pod_count(workload, placement) * placement.node_count)
