"""trainjob: a Kubeflow Trainer v2 TrainJob (manifests/trainjob.yaml) referencing the TRAINJOB_RUNTIME
ClusterTrainingRuntime (torch-distributed). Trainer makes it a JobSet of the same name, replicated
job `node`: one Indexed Job of a pod per node, hostnames `<job>-node-0-<i>` under the JobSet's
headless Service; its torch plugin gives each pod PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the
completion index), PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun reads, so the command is
plain `torchrun -m <module> ...`: rank r runs on the pod of completion index r // P, as torchrun's.

Elastic workloads (TestElasticRecovery) get a TrainingRuntime of their own in the test's namespace
(manifests/trainjob-elastic-runtime.yaml: JobSet failurePolicy.maxRestarts, Job backoffLimit 0,
restartPolicy Never), since Trainer v2.1.0's TrainJob has no failure policy: a lost worker fails its
Job, JobSet recreates every Job, and the ranks resume from the checkpoint they keep in a hostPath
folder (CHECKPOINT_ROOT), which outlives the pods (a pod's own files go with it).

Done: the TrainJob is Complete. Failed at once: the TrainJob Failed (its JobSet's reason, or an
unsupported runtime) or Suspended, the JobSet Failed (FailedJobs, ReachedMaxRestarts, ...), a
Warning event of the TrainJob saying its runtime is gone or of the JobSet saying it cannot create
its Jobs or Service, the Job Failed (not elastic: JobSet restarts those), and the pod failures
every launcher catches; a TrainJob the admission webhook rejects (a missing runtime, reserved PET_*
variables) fails at apply with the webhook's message (harness.jobs.job.launch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness.cluster.conditions import (
    job_failed,
    jobset_failed,
    suspended,
    trainjob_failed,
    trainjob_succeeded,
    warning_event,
)
from harness.cluster.labels import job_selector
from harness.cluster.resources import JOB, JOBSET, TRAINJOB, Obj, Resource
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import Launcher, container_env, worker_fields
from harness.jobs.workload import Placement, Rendering, Workload

# The replicated job Trainer's torch runtimes name their workers (the JobSet's Job: <job>-node-0).
REPLICATED_JOB = "node"
# Where an elastic TrainJob's ranks keep checkpoints: a hostPath folder of each node, mounted at the
# same path, so a recreated pod on the same node finds what its predecessor saved (each node's local
# rank 0 writes a copy; workloads/checkpoint.py hands the newest any rank sees to all).
CHECKPOINT_ROOT = "/var/tmp/kubetest2-training-checkpoints"
# Pod annotation of an elastic TrainJob's pods: how many JobSet restarts its runtime allows. A Failed
# pod so marked is a run JobSet restarts (judged by the JobSet's failure, not the pod's).
RESTARTS_ANNOTATION = "kubetest2-training/jobset-max-restarts"
# JobSet's labels on its Jobs and pods.
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# Trainer's event when it cannot make a TrainJob's JobSet; fatal when the runtime is gone (admission
# checked it existed; deleted since), else retried by Trainer (e.g. a conflict) and left to it.
RUNTIME_GONE = re.compile(r"not found ClusterTrainingRuntime|TrainingRuntime specified in TrainJob is not found")
# JobSet's events when it cannot create the Jobs or the headless Service (admission, quota).
JOBSET_CREATION_FAILED = ("JobCreationFailed", "HeadlessServiceCreationFailed")
DSHM = ({"name": "dshm", "emptyDir": {"medium": "Memory"}}, {"name": "dshm", "mountPath": "/dev/shm"})
CHECKPOINTS = ({"name": "checkpoints", "hostPath": {"path": CHECKPOINT_ROOT, "type": "DirectoryOrCreate"}},
               {"name": "checkpoints", "mountPath": CHECKPOINT_ROOT})


def runtime_ref(workload: Workload, runtime: str) -> tuple[str, str]:
    """(kind, name) of the TrainJob's runtime: its own TrainingRuntime when elastic, else the
    cluster's ClusterTrainingRuntime."""
    return ("TrainingRuntime", workload.job_name) if workload.elastic else ("ClusterTrainingRuntime", runtime)


class TrainJob(Launcher):
    name = "trainjob"
    owner = TRAINJOB
    needs_api = TRAINJOB

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        fields = worker_fields(workload, placement)
        kind, runtime = runtime_ref(workload, placement.trainjob_runtime)
        mounted = [DSHM, *([CHECKPOINTS] if workload.elastic else [])]
        annotations = dict(placement.pod_annotations)
        renderings = []
        if workload.elastic:
            annotations[RESTARTS_ANNOTATION] = str(workload.max_restarts)
            renderings.append(Rendering("trainjob-elastic-runtime.yaml", {
                "JobName": workload.job_name, "Namespace": placement.namespace, "Labels": fields["Labels"],
                "Image": fields["Image"], "ImagePullPolicy": fields["ImagePullPolicy"],
                "MaxRestarts": workload.max_restarts}))
        renderings.append(Rendering("trainjob.yaml", {
            **fields,
            "PodAnnotations": annotations,
            "RuntimeKind": kind,
            "RuntimeName": runtime,
            "SlotsPerWorker": placement.processes_per_node,
            "Command": ["torchrun"],
            "Args": trainjob_args(workload),
            # No MASTER_ADDR: Trainer's PET_MASTER_ADDR is torchrun's, and torchrun sets the ranks'.
            "Env": container_env(workload, placement, None),
            "Volumes": [volume for volume, _ in mounted],
            "VolumeMounts": [mount for _, mount in mounted],
        }))
        return renderings

    def made_by_controllers(self, workload: Workload, placement: Placement) -> list[tuple[Resource, str]]:
        """The JobSet (Trainer gives it the TrainJob's spec.labels, the job's own) and its Jobs (JobSet's
        label naming their JobSet)."""
        return [(JOBSET, job_selector(workload.job_name)), (JOB, f"{JOBSET_NAME_LABEL}={workload.job_name}")]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return trainjob_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        namespace, name = placement.namespace, workload.job_name
        conditions = [trainjob_failed(namespace, name), suspended(TRAINJOB, namespace, name),
                      jobset_failed(namespace, name),
                      warning_event(namespace, "TrainJob", name, ("TrainJobResourcesCreationFailed",), RUNTIME_GONE),
                      warning_event(namespace, "JobSet", name, JOBSET_CREATION_FAILED)]
        if not workload.elastic:  # an elastic set's failed Job is what JobSet restarts
            conditions.append(job_failed(namespace, f"{name}-{REPLICATED_JOB}-0"))
        return conditions

    def retried(self, pod: Obj) -> bool:
        """A Failed pod of an elastic TrainJob: JobSet restarts the set (its failure is the JobSet's)."""
        annotations = pod.get("metadata", {}).get("annotations") or {}
        return annotations.get(RESTARTS_ANNOTATION, "0") != "0"

    def run_counts(self, pods: Iterable[Obj]) -> dict[str, int]:
        """jobset.restarts: the restart attempts the pods seen carry (0: never restarted)."""
        attempts = [int((pod.get("metadata", {}).get("labels") or {}).get(RESTART_ATTEMPT_LABEL, "0") or 0)
                    for pod in pods]
        return {"jobset.restarts": max(attempts, default=0)}


def trainjob_args(workload: Workload) -> list[str]:
    """torchrun's arguments: the program only; nodes, processes, rank and rendezvous come from PET_*."""
    if workload.module is not None:
        return ["-m", workload.module, *workload.args]
    return ["--no-python", str(workload.binary), *workload.args]

