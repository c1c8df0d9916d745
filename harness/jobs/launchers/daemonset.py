"""daemonset: a DaemonSet on the nodes' type, its pods running a check and staying up (upstream's
containerd check); done when a Ready pod runs on each selected node."""

from __future__ import annotations

from harness.cluster.conditions import (
    daemonset_short,
    pods_ready_on_nodes,
)
from harness.cluster.labels import job_selector
from harness.cluster.resources import DAEMONSET
from harness.cluster.wait import Condition
from harness.config.topology import INSTANCE_TYPE_LABEL
from harness.jobs.launchers.base import (
    Launcher,
    common_fields,
    container_env,
    host_mounts,
    node_affinity,
)
from harness.jobs.workload import Placement, Rendering, Workload


class DaemonSetCheck(Launcher):
    """A DaemonSet on the nodes' type whose pods run a check and then stay up (upstream's
    containerd check): done once a Ready pod runs on each selected node."""

    name = "daemonset"
    owner = DAEMONSET

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        mounts, volumes = host_mounts(workload)
        return [Rendering("daemonset.yaml", {
            **common_fields(workload, placement), "Command": workload.program(),
            "Env": container_env(workload, placement, None), "NodeSelector": {INSTANCE_TYPE_LABEL: placement.node_type},
            "NodeAffinity": node_affinity(placement),
            "VolumeMounts": mounts, "Volumes": volumes})]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return pods_ready_on_nodes(placement.namespace, job_selector(workload.job_name), placement.node_names)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        """The DaemonSet will not place a pod on every selected node (an untolerated taint): fails in
        seconds, naming the nodes and why, instead of waiting JOB_TIMEOUT for pods never created."""
        return [daemonset_short(placement.namespace, workload.job_name, placement.node_names)]
