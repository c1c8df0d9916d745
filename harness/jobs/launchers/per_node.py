"""per-node: a Job per node with its pod pinned there, running the command once (probes such as
listing a node's GPUs with nvidia-smi)."""

from __future__ import annotations

from harness.cluster.conditions import (
    pods_succeeded,
)
from harness.cluster.labels import job_selector
from harness.cluster.resources import JOB
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import (
    JobPerNode,
    common_fields,
    container_env,
    host_mounts,
    node_requests,
)
from harness.jobs.workload import Placement, Rendering, Workload

# /dev/shm backed by memory (manifests/per-node-job.yaml says why).
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
SHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory"}}


def pod_gpus(workload: Workload, placement: Placement) -> int:
    """The GPUs each pod asks for: the workload's, else all its node's."""
    return workload.gpus if workload.gpus is not None else placement.processes_per_node


class PerNode(JobPerNode):
    name = "per-node"
    owner = JOB

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        common = common_fields(workload, placement)
        mounts, volumes = host_mounts(workload)
        return [Rendering("per-node-job.yaml", {
            **common, "JobName": job_name, "NodeName": node, "GPUPerNode": pod_gpus(workload, placement),
            "Requests": node_requests(placement),
            "ActiveDeadlineSeconds": workload.deadline_seconds or int(placement.job_timeout) + 60,
            "Command": workload.program(), "Env": container_env(workload, placement, None),
            "VolumeMounts": [SHM_MOUNT, *mounts], "Volumes": [SHM_VOLUME, *volumes]})
            for job_name, node in self.jobs(workload, placement)]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return pods_succeeded(placement.namespace, job_selector(workload.job_name), placement.node_count)
