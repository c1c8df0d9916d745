"""Launchers: how a workload is rendered onto the nodes, which object says it is done or failed,
where its ranks run, and what its pods and logs say after a failure. Pure: given a Workload and a
Placement (or the pods and logs already captured), no cluster access.

- torchrun: an Indexed Job (one pod per node, `torchrun --node-rank=$(JOB_COMPLETION_INDEX)`)
  plus a headless Service so worker 0 is reachable as <job>-0.<job>; no operator needed.
- mpi: an MPIJob v2beta1 (mpi-operator) in the shape of upstream's: `mpirun --tag-output` in the
  launcher, `-x` for every variable the ranks need, one worker per node running sshd; a failed
  launcher run is a retry of its Job, a lost worker or the Job's failure is explained from
  mpirun's log (harness.jobs.mpirun).
- per-node: a Job per node with its pod pinned there, running the command once (probes such as
  listing a node's GPUs).
- daemonset: a DaemonSet on the nodes' type, its pods running a check and staying up (upstream's
  containerd check); done when a Ready pod runs on each selected node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from harness.cluster.conditions import (
    job_failed,
    job_succeeded,
    mpi_worker_lost,
    mpijob_failed,
    mpijob_succeeded,
    pods_ended,
    pods_ready_on_nodes,
    pods_succeeded,
)
from harness.cluster.labels import job_selector
from harness.cluster.logs import CapturedLog
from harness.cluster.pods import mpi_role
from harness.cluster.resources import DAEMONSET, JOB, MPIJOB, Obj, Resource
from harness.cluster.wait import Condition
from harness.config.topology import EFA_RESOURCE, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from harness.jobs.mpirun import explain_failure as explain_mpirun_failure
from harness.jobs.mpirun import launcher_pods, launcher_runs
from harness.jobs.workload import Placement, Rendering, Workload

MASTER_PORT = 29500


def _resources(placement: Placement) -> dict[str, Any]:
    """A worker's requests: a CPU per process on ACCELERATOR=cpu, else its GPUs and EFA devices."""
    if placement.accelerator == "cpu":
        return {"requests": {"cpu": str(placement.processes_per_node)}}
    limits: dict[str, Any] = {GPU_RESOURCE: placement.processes_per_node}
    if placement.efa_per_node:
        limits[EFA_RESOURCE] = placement.efa_per_node
    return {"limits": limits, "requests": dict(limits)}


def _env_values(workload: Workload, placement: Placement, master_addr: str | None) -> dict[str, str]:
    """What every process needs: rendezvous (unless master_addr is None: a probe), NUM_GPUS_PER_NODE,
    the caller's NCCL_*/FI_*, the workload's own."""
    rendezvous = {} if master_addr is None else {"MASTER_ADDR": master_addr, "MASTER_PORT": str(MASTER_PORT)}
    return {
        **placement.pod_env,
        "NUM_GPUS_PER_NODE": str(placement.processes_per_node),
        **rendezvous,
        "ACCELERATOR": placement.accelerator,
        "PYTHONUNBUFFERED": "1",
        # One thread per process on CPU, the one CPU each process requests: without it every rank's
        # torch takes all the node's cores, ranks sharing cores fight, and their timings (the compute
        # probe, the compute time the straggler verdict compares) differ 5x with nothing slow.
        **({"OMP_NUM_THREADS": "1"} if placement.accelerator == "cpu" else {}),
        **({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if workload.elastic else {}),
        **workload.extra_env,
    }


def _env_list(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _env(workload: Workload, placement: Placement, master_addr: str | None) -> list[dict[str, Any]]:
    """A worker container's environment: the values above, and its node and pod."""
    env = _env_list(_env_values(workload, placement, master_addr))
    env += [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return env


def _common_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    return {"JobName": workload.job_name, "Namespace": placement.namespace, "Labels": dict(placement.labels),
            "PodAnnotations": dict(placement.pod_annotations), "Image": workload.image or placement.image}


def _worker_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    """What the worker pods of torchrun and mpi share: replicas, resources, node selector."""
    return {**_common_fields(workload, placement), "WorkerReplicas": placement.node_count,
            "Resources": _resources(placement), "NodeSelector": {INSTANCE_TYPE_LABEL: placement.node_type}}


class Launcher:
    """How one kind of launcher renders a workload, and how its success and failure show."""

    name: ClassVar[str]
    owner: ClassVar[Resource]  # the kind of the objects that own the pods (deleted at teardown)
    # The API the launcher needs the cluster to serve, if not a built-in one: (apiVersion, kind).
    needs_api: ClassVar[tuple[str, str] | None] = None
    # Whether rank_locations() places every rank exactly, over what each rank says of its node.
    places_ranks: ClassVar[bool] = False

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        raise NotImplementedError

    def owners(self, workload: Workload, placement: Placement) -> list[str]:
        """The names of the owner objects."""
        return [workload.job_name]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        raise NotImplementedError

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        """Failure conditions of the owners (the pods' failures are judged for every launcher)."""
        return []

    def retried(self, pod: Obj) -> bool:
        """Whether this pod, once Failed, is a run its owner retries (judged by the owner's failure)."""
        return False

    def run_counts(self, pods: Iterable[Obj]) -> dict[str, int]:
        """Counts of the owner's runs, retries included, as JUnit properties."""
        return {}

    def awaited_after_failure(self, workload: Workload, placement: Placement, blamed: str | None,
                              pods: Mapping[str, Obj]) -> Condition | None:
        """What to await (briefly) after a failure, before the logs are captured."""
        return None

    def explain_failure(self, reason: str, pods: Mapping[str, Obj], captured: list[CapturedLog],
                        locations: Mapping[int, tuple[str, str]]) -> str | None:
        """The failure message from the pods and their logs; None: the blamed pod's last lines."""
        return None


class Torchrun(Launcher):
    name = "torchrun"
    owner = JOB

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        name = workload.job_name
        return [Rendering("torchrun-job.yaml", {
            **_worker_fields(workload, placement),
            "Command": ["torchrun"],
            "Args": torchrun_args(workload, placement),
            "Env": _env(workload, placement, f"{name}-0.{name}"),
            "MasterPort": MASTER_PORT,
            # Elastic jobs survive a worker's loss through torchrun; others fail on the first pod.
            "BackoffLimit": placement.node_count * 2 if workload.elastic else 0,
            "ActiveDeadlineSeconds": max(60, int(placement.job_timeout) + 60),
        })]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return job_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        return [job_failed(placement.namespace, workload.job_name)]


def torchrun_args(workload: Workload, placement: Placement) -> list[str]:
    """torchrun's arguments: static rendezvous on worker 0, or c10d with restarts when elastic."""
    nodes, per_node = placement.node_count, placement.processes_per_node
    if workload.elastic:
        launch = [f"--nnodes=1:{nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
                  f"--rdzv-endpoint=$(MASTER_ADDR):{MASTER_PORT}", f"--rdzv-id={workload.job_name}",
                  f"--max-restarts={workload.max_restarts}"]
    else:
        launch = [f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
                  "--node-rank=$(JOB_COMPLETION_INDEX)", "--master-addr=$(MASTER_ADDR)",
                  f"--master-port={MASTER_PORT}"]
    if workload.module is not None:
        return [*launch, "-m", workload.module, *workload.args]
    return [*launch, "--no-python", str(workload.binary), *workload.args]


# Forwarded to every rank besides the launcher's env (-x is the only way a variable reaches a
# rank: sshd gives the ranks neither the worker's env nor the launcher's): set by the image.
MPIRUN_IMAGE_VARIABLES = ("PATH", "LD_LIBRARY_PATH")
# OpenMPI's own traffic on a real cluster: TCP over the pod network (not loopback or a docker
# bridge), and not the cm PML (EFA's libfabric MTL is NCCL's; mpirun only bootstraps).
MPIRUN_MCA = (("pml", "^cm"), ("btl", "tcp,self"), ("btl_tcp_if_exclude", "lo,docker0"))
# Failed launcher runs its Job retries. Upstream's 20 absorbs a launcher that starts before its
# workers resolve; WaitForWorkersReady removes that race, and what is left (a DNS record lagging a
# Ready worker) needs one. More would rerun a deterministic failure (a rank that crashes) at the
# cost of a whole run each, behind the Job's growing back-off (10 s, 20 s, ...). Retries are
# reported, never hidden (launcher.runs, launcher.failed).
MPI_LAUNCHER_BACKOFF_LIMIT = 1


def mpi_master_addr(job_name: str) -> str:
    """Worker 0 under the headless Service mpi-operator names after the job."""
    return f"{job_name}-worker-0.{job_name}"


class Mpi(Launcher):
    name = "mpi"
    owner = MPIJOB
    needs_api = ("kubeflow.org/v2beta1", "MPIJob")
    # -map-by slot: rank r on worker r // slots; a rank's hostname is its worker pod's name.
    places_ranks = True

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        env = _env_values(workload, placement, mpi_master_addr(workload.job_name))
        return [Rendering("mpijob.yaml", {
            **_worker_fields(workload, placement),
            "SlotsPerWorker": placement.processes_per_node,
            "BackoffLimit": MPI_LAUNCHER_BACKOFF_LIMIT,
            "LauncherCommand": mpirun_command(workload, placement, env),
            "LauncherEnv": _env_list(env),
        })]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return mpijob_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        """The MPIJob or its launcher's Job failed (retries exhausted), or a worker was lost."""
        namespace, name = placement.namespace, workload.job_name
        return [mpijob_failed(namespace, name), job_failed(namespace, f"{name}-launcher"),
                mpi_worker_lost(namespace, job_selector(name))]

    def retried(self, pod: Obj) -> bool:
        return mpi_role(pod) == "launcher"

    def run_counts(self, pods: Iterable[Obj]) -> dict[str, int]:
        runs, failed = launcher_runs(pods)
        return {"launcher.runs": runs, "launcher.failed": failed}

    def awaited_after_failure(self, workload: Workload, placement: Placement, blamed: str | None,
                              pods: Mapping[str, Obj]) -> Condition | None:
        """A worker failed or was lost: mpirun is still noticing it; its words come as it exits."""
        if blamed is None or mpi_role(pods.get(blamed, {})) != "worker":
            return None
        running = [pod["metadata"]["name"] for pod in launcher_pods(pods.values())
                   if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        return pods_ended(placement.namespace, job_selector(workload.job_name), running)

    def explain_failure(self, reason: str, pods: Mapping[str, Obj], captured: list[CapturedLog],
                        locations: Mapping[int, tuple[str, str]]) -> str | None:
        return explain_mpirun_failure(reason, pods, captured, locations)


def mpirun_command(workload: Workload, placement: Placement, env: Mapping[str, str]) -> list[str]:
    """The launcher's mpirun, as upstream's: one slot per process on every worker (rank r on
    worker r // slots), output tagged by rank, every variable of the launcher's env forwarded."""
    forwarded = dict.fromkeys((*MPIRUN_IMAGE_VARIABLES, *env))
    return ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(placement.world_size),
            "-bind-to", "none", "-map-by", "slot",
            *[arg for key, value in MPIRUN_MCA for arg in ("--mca", key, value)],
            *[arg for name in forwarded for arg in ("-x", name)], *workload.program()]


class PerNode(Launcher):
    name = "per-node"
    owner = JOB

    def owners(self, workload: Workload, placement: Placement) -> list[str]:
        return [f"{workload.job_name}-{node}"[:63].rstrip("-.") for node in placement.node_names]

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        common = _common_fields(workload, placement)
        return [Rendering("per-node-job.yaml", {
            **common, "JobName": job_name, "NodeName": node, "GPUPerNode": placement.processes_per_node,
            "Command": workload.program(), "Env": _env(workload, placement, None)})
            for job_name, node in zip(self.owners(workload, placement), placement.node_names, strict=True)]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return pods_succeeded(placement.namespace, job_selector(workload.job_name), placement.node_count)


class DaemonSetCheck(Launcher):
    """A DaemonSet on the nodes' type whose pods run a check and then stay up (upstream's
    containerd check): done once a Ready pod runs on each selected node."""

    name = "daemonset"
    owner = DAEMONSET

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        mounts = sorted(workload.host_paths.items())
        return [Rendering("daemonset.yaml", {
            **_common_fields(workload, placement), "Command": workload.program(),
            "Env": _env(workload, placement, None), "NodeSelector": {INSTANCE_TYPE_LABEL: placement.node_type},
            "VolumeMounts": [{"name": f"host-{i}", "mountPath": path, "readOnly": True} for i, (path, _) in
                             enumerate(mounts)],
            "Volumes": [{"name": f"host-{i}", "hostPath": {"path": host}} for i, (_, host) in enumerate(mounts)]})]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return pods_ready_on_nodes(placement.namespace, job_selector(workload.job_name), placement.node_names)


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher
                                  for launcher in (Torchrun(), Mpi(), PerNode(), DaemonSetCheck())}


def rank_locations(pods: list[Obj], processes_per_node: int) -> dict[int, tuple[str, str]]:
    """rank -> (pod, node): torchrun puts ranks [i*P, (i+1)*P) on index i; mpirun -map-by slot
    fills worker i's slots in order. Pods being deleted are left out."""
    workers: dict[int, Obj] = {}
    for pod in pods:
        meta = pod["metadata"]
        index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        if index is None:
            match = re.search(r"-worker-(\d+)$", meta["name"])
            index = match.group(1) if match else None
        if index is not None and not meta.get("deletionTimestamp"):
            workers[int(index)] = pod
    return {index * processes_per_node + local: (pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?"))
            for index, pod in workers.items() for local in range(processes_per_node)}
