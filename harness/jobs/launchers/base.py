"""What every launcher shares: the Launcher interface (render, done, failed, what a failure says),
the environment and resources of a worker, and where each rank ran (rank_locations)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from harness.cluster.logs import CapturedLog
from harness.cluster.resources import Obj, Resource
from harness.cluster.wait import Condition
from harness.config.topology import EFA_RESOURCE, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from harness.jobs.workload import Placement, Rendering, Workload

MASTER_PORT = 29500


def worker_resources(placement: Placement) -> dict[str, Any]:
    """A worker's requests: a CPU per process on ACCELERATOR=cpu, else its GPUs and EFA devices."""
    if placement.accelerator == "cpu":
        return {"requests": {"cpu": str(placement.processes_per_node)}}
    limits: dict[str, Any] = {GPU_RESOURCE: placement.processes_per_node}
    if placement.efa_per_node:
        limits[EFA_RESOURCE] = placement.efa_per_node
    return {"limits": limits, "requests": dict(limits)}


def env_values(workload: Workload, placement: Placement, master_addr: str | None) -> dict[str, str]:
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


def env_list(values: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def container_env(workload: Workload, placement: Placement, master_addr: str | None) -> list[dict[str, Any]]:
    """A worker container's environment: the values above, and its node and pod."""
    env = env_list(env_values(workload, placement, master_addr))
    env += [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return env


def common_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    return {"JobName": workload.job_name, "Namespace": placement.namespace, "Labels": dict(placement.labels),
            "PodAnnotations": dict(placement.pod_annotations), "Image": workload.image or placement.image}


def worker_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    """What the worker pods of torchrun and mpi share: replicas, resources, node selector."""
    return {**common_fields(workload, placement), "WorkerReplicas": placement.node_count,
            "Resources": worker_resources(placement), "NodeSelector": {INSTANCE_TYPE_LABEL: placement.node_type}}


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

    def made_by_controllers(self, workload: Workload, placement: Placement) -> list[tuple[Resource, str]]:
        """(kind, label selector) of the objects the owner's controllers make between it and the
        pods (a TrainJob's JobSet and Jobs): saved with the artifacts' manifests."""
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


def rank_locations(pods: list[Obj], processes_per_node: int) -> dict[int, tuple[str, str]]:
    """rank -> (pod, node): torchrun puts ranks [i*P, (i+1)*P) on index i; mpirun -map-by slot
    fills worker i's slots in order (JobSet's pods carry the completion index too). Pods being
    deleted are left out; of two pods of one index the newer counts."""
    workers: dict[int, Obj] = {}
    for pod in pods:
        meta = pod["metadata"]
        index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        if index is None:
            match = re.search(r"-worker-(\d+)$", meta["name"])
            index = match.group(1) if match else None
        if index is None or meta.get("deletionTimestamp"):
            continue
        # A replaced pod (a JobSet restart, a Job's retry) and its replacement: the newer ran last.
        held = workers.get(int(index))
        if held is None or meta.get("creationTimestamp", "") >= held["metadata"].get("creationTimestamp", ""):
            workers[int(index)] = pod
    return {index * processes_per_node + local: (pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?"))
            for index, pod in workers.items() for local in range(processes_per_node)}
