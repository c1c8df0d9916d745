"""dlrover: a DLRover ElasticJob (manifests/elasticjob.yaml), as DLRover's nanoGPT example runs it.
DLRover's operator makes the job's master pod; the master (`dlrover.python.master.main`, pyk8s
platform) creates one worker pod per node from the job's worker template, each running
`dlrover-run`, whose agents meet in the master's rendezvous and start the ranks with torchrun's
variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR), so the workloads run unchanged. A worker pod
that is lost (deleted, its node gone) or fails is relaunched by the master under a new name with
the same rank (label elasticjob.dlrover/rank-index), up to the worker spec's restartCount; the
surviving agents restart their ranks when the membership changes (TORCHELASTIC_RESTART_COUNT), and
the ranks resume from the checkpoint kept in a hostPath folder of each node, as the elastic
TrainJob's (a relaunched pod's own files are new).

The master runs as its namespace's `default` ServiceAccount; the job's RoleBinding gives it the
ClusterRole kubetest2-training-dlrover-master of manifests/rbac.yaml in that namespace only.

Done: the ElasticJob is Succeeded (the operator's word once the master pod succeeded). Failed at
once: the ElasticJob Failed (the master pod failed), and the pod failures every launcher catches,
but for a worker pod's failure the master relaunches (judged by the job's failure instead).
DLRover's master sets each worker container's limits to its requests (CPU and memory: its
`set_container_resource`), so a worker on ACCELERATOR=cpu requests a CPU per process and half its
node's memory, and on GPU nodes the CPU and memory a GPU pod requests become its limits too.
"""

from __future__ import annotations

from typing import Any

from harness.cluster.conditions import elasticjob_failed, elasticjob_succeeded
from harness.cluster.labels import job_selector
from harness.cluster.manifests import DLROVER_MASTER_ROLE
from harness.cluster.pods import DLROVER_REPLICA_TYPE_LABEL, pod_role
from harness.cluster.resources import ELASTICJOB, Obj
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import (
    NODE_REQUEST_FRACTION,
    Launcher,
    OperatorLog,
    container_env,
    worker_fields,
    worker_resources,
)
from harness.jobs.launchers.trainjob import CHECKPOINTS, DSHM
from harness.jobs.workload import Placement, Rendering, Workload

# manifests/rbac.yaml: what a job's master may do in the job's namespace (pods, services, its
# ElasticJob and ScalePlans, as DLRover's own default-role but namespaced and without nodes).
MASTER_CLUSTER_ROLE = DLROVER_MASTER_ROLE
# DLRover's manifests install the operator as Deployment dlrover-controller-manager (namespace
# dlrover, container manager); the local cluster runs it as a process (DLROVER_OPERATOR_LOG).
OPERATOR = OperatorLog("dlrover-elasticjob-operator", "DLRover ElasticJob operator", "dlrover_operator_log",
                       "dlrover", "control-plane=controller-manager", "manager")
# Pod annotation of an elastic ElasticJob's workers: how often the master relaunches a worker.
RELAUNCHES_ANNOTATION = "kubetest2-training/dlrover-restart-count"


def dlrover_resources(placement: Placement) -> dict[str, Any]:
    """A worker's resources. On ACCELERATOR=cpu a CPU per process and NODE_REQUEST_FRACTION of the
    node's memory: DLRover's master turns the requests into limits, and a memory request left out
    would become a limit of 0Mi. On GPU nodes the GPU pod's requests (launchers.base)."""
    resources = worker_resources(placement)
    if placement.accelerator != "cpu":
        return resources
    requests = dict(resources["requests"])
    if placement.node_allocatable_memory > 0:
        requests["memory"] = str(int(placement.node_allocatable_memory * NODE_REQUEST_FRACTION))
    return {"requests": requests}


class DLRover(Launcher):
    name = "dlrover"
    owner = ELASTICJOB
    needs_api = ELASTICJOB
    operator = OPERATOR
    # The master deletes every succeeded worker pod (its watcher's list(), seconds after the worker
    # ends) and relaunches a failed one under a new name: their logs are read as they end.
    deletes_finished_pods = True

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        fields = worker_fields(workload, placement)
        mounted = [DSHM, *([CHECKPOINTS] if workload.elastic else [])]
        annotations = dict(placement.pod_annotations)
        if workload.elastic:
            annotations[RELAUNCHES_ANNOTATION] = str(workload.max_restarts)
        return [Rendering("elasticjob.yaml", {
            **fields,
            "PodAnnotations": annotations,
            "MasterClusterRole": MASTER_CLUSTER_ROLE,
            # Not elastic: a lost worker fails the job, as under the other launchers.
            "RestartCount": workload.max_restarts if workload.elastic else 0,
            "Resources": dlrover_resources(placement),
            "Command": ["dlrover-run"],
            "Args": dlrover_run_args(workload, placement),
            # No MASTER_ADDR: DLRover's rendezvous gives the ranks theirs.
            "Env": container_env(workload, placement, None),
            "Volumes": [volume for volume, _ in mounted],
            "VolumeMounts": [mount for _, mount in mounted],
        })]

    def worker_selector(self, workload: Workload) -> str:
        return f"{job_selector(workload.job_name)},{DLROVER_REPLICA_TYPE_LABEL}=worker"

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return elasticjob_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        return [elasticjob_failed(placement.namespace, workload.job_name)]

    def retried(self, pod: Obj) -> bool:
        """A Failed worker of an elastic ElasticJob: its master relaunches it (or fails the job)."""
        annotations = pod.get("metadata", {}).get("annotations") or {}
        return pod_role(pod) == "worker" and int(annotations.get(RELAUNCHES_ANNOTATION, "0")) > 0


def dlrover_run_args(workload: Workload, placement: Placement) -> list[str]:
    """dlrover-run's arguments (torchrun's, which it extends): every node's agent waits for all
    of them (a lost worker's replacement rejoins: the master relaunches it), and an elastic job's
    agents restart their ranks when the membership changes."""
    restarts = workload.max_restarts if workload.elastic else 0
    launch = [f"--nnodes={placement.node_count}", f"--nproc_per_node={placement.processes_per_node}",
              f"--max-restarts={restarts}"]
    if workload.module is not None:
        return [*launch, "-m", workload.module, *workload.args]
    return [*launch, "--no-python", str(workload.binary), *workload.args]
