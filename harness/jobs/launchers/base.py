"""What every launcher shares: the Launcher interface (render, done, failed, what a failure says),
the environment and resources of a worker, and where each rank ran (rank_locations)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.cluster.labels import job_selector
from harness.cluster.logs import CapturedLog
from harness.cluster.pods import DLROVER_RANK_LABEL, pod_role
from harness.cluster.resources import Obj, Resource
from harness.cluster.wait import Condition
from harness.config.settings import is_project_image
from harness.config.topology import DEFAULT_TOLERATIONS, EFA_RESOURCE, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from harness.jobs.workload import Placement, Rendering, Workload

MASTER_PORT = 29500


def host_mounts(workload: Workload) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The workload's host folders as read-only volume mounts and their hostPath volumes."""
    mounts = sorted(workload.host_paths.items())
    return ([{"name": f"host-{i}", "mountPath": path, "readOnly": True} for i, (path, _) in enumerate(mounts)],
            [{"name": f"host-{i}", "hostPath": {"path": host}} for i, (_, host) in enumerate(mounts)])


def pod_tolerations(placement: Placement) -> list[dict[str, str]]:
    """The tolerations of every pod the suite creates, any launcher's (harness.config.topology's
    DEFAULT_TOLERATIONS, and TOLERATIONS'): the one place a template's pods get theirs."""
    return [*map(dict, DEFAULT_TOLERATIONS), *map(dict, placement.extra_tolerations)]


# GPU pods request this share of their node's allocatable CPU and memory (the smallest node's), no
# limit. Without requests they were BestEffort: first evicted and OOM-killed under memory pressure,
# and the least CPU share when the node is busy. Half, not all: allocatable does not subtract the
# DaemonSets every GPU node runs (CNI, kube-proxy, device plugins, DCGM exporter), whose requests
# would leave an all-of-it pod Pending; no limit, so the job still uses the whole node. A GPU pod
# asks for all the node's GPUs, so no second one shares the node anyway.
NODE_REQUEST_FRACTION = 0.5


def node_requests(placement: Placement) -> dict[str, str]:
    """The CPU and memory a GPU pod requests (NODE_REQUEST_FRACTION of allocatable); none on
    ACCELERATOR=cpu (a CPU per process there) or where the nodes say nothing."""
    if placement.accelerator == "cpu":
        return {}
    requests = {}
    if placement.node_allocatable_cpu > 0:
        requests["cpu"] = f"{int(placement.node_allocatable_cpu * 1000 * NODE_REQUEST_FRACTION)}m"
    if placement.node_allocatable_memory > 0:
        requests["memory"] = str(int(placement.node_allocatable_memory * NODE_REQUEST_FRACTION))
    return requests


def worker_resources(placement: Placement) -> dict[str, Any]:
    """A worker's requests: a CPU per process on ACCELERATOR=cpu, else its GPUs and EFA devices
    (limits and requests) and node_requests' CPU and memory."""
    if placement.accelerator == "cpu":
        return {"requests": {"cpu": str(placement.processes_per_node)}}
    limits: dict[str, Any] = {GPU_RESOURCE: placement.processes_per_node}
    if placement.efa_per_node:
        limits[EFA_RESOURCE] = placement.efa_per_node
    return {"limits": limits, "requests": {**limits, **node_requests(placement)}}


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


def pull_policy(setting: str, image: str) -> str:
    """IMAGE_PULL_POLICY for one image: `upstream` is upstream's Always for a tag (a reused node must
    not run a stale mutable tag) and IfNotPresent for a digest (it cannot change); else the setting."""
    if setting != "upstream":
        return setting
    return "IfNotPresent" if "@" in image else "Always"


def security_context(image: str, capabilities: Iterable[str] = ()) -> dict[str, Any]:
    """A container's securityContext. This project's images (`kubetest2-training/...`): every
    capability dropped but `capabilities`, the set each program was proven to need on them, and no
    privilege escalation. Any other image (upstream's, NVIDIA's, the user's: Ubuntu sshd with PAM,
    dcgmi, HPL's mpirun, apt) keeps the runtime's default capabilities, as upstream's manifests leave
    them (no securityContext): a reduced set proven on our images says nothing about theirs.
    `capabilities` beyond the defaults (DCGM's SYS_ADMIN) are added there too."""
    added = {"add": list(capabilities)} if capabilities else {}
    if is_project_image(image):
        return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], **added}}
    return {"capabilities": added} if added else {}


def common_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    image = workload.image or placement.image
    return {"JobName": workload.job_name, "Namespace": placement.namespace, "Labels": dict(placement.labels),
            "PodAnnotations": dict(placement.pod_annotations), "Image": image,
            "ImagePullPolicy": pull_policy(placement.image_pull_policy, image),
            "Tolerations": pod_tolerations(placement),
            "SecurityContext": security_context(image, workload.capabilities)}


def node_affinity(placement: Placement) -> dict[str, Any]:
    """A pod's nodeAffinity that pins it to the nodes discovery chose (placement.node_names), by
    node name: one term per node (terms are ORed; the API allows one value per `metadata.name`
    field selector), as the DaemonSet controller pins its pods, since a node's hostname label need
    not be its name. Without it a pod may land on any node of the type while the NotReady watch and
    the report name the chosen ones. Every template that places work uses it."""
    if not placement.node_names:
        raise ValueError("node_affinity: a placement with no node names (discovery chose none)")
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
             for name in placement.node_names]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def worker_fields(workload: Workload, placement: Placement) -> dict[str, Any]:
    """What the worker pods of torchrun and mpi share: replicas, resources, node selector and the
    chosen nodes."""
    return {**common_fields(workload, placement), "WorkerReplicas": placement.node_count,
            "Resources": worker_resources(placement), "NodeSelector": {INSTANCE_TYPE_LABEL: placement.node_type},
            "NodeAffinity": node_affinity(placement)}


@dataclass(frozen=True)
class OperatorLog:
    """Where the log of the operator that runs a launcher's owner is (harness.jobs.operator_logs
    reads it): a file when it runs outside the cluster (the Config attribute `file_setting` names
    it), else the container `container` of its pods (`selector` in `namespace`)."""

    name: str  # in file and property names
    title: str
    file_setting: str
    namespace: str
    selector: str
    container: str


class Launcher:
    """How one kind of launcher renders a workload, and how its success and failure show."""

    name: ClassVar[str]
    owner: ClassVar[Resource]  # the kind of the objects that own the pods (deleted at teardown)
    # The API the launcher needs the cluster to serve, if not a built-in one (harness.setup.operators
    # installs what serves it when missing).
    needs_api: ClassVar[Resource | None] = None
    # Whether rank_locations() places every rank exactly, over what each rank says of its node.
    places_ranks: ClassVar[bool] = False
    # The operator whose lines about the job go into its JUnit, if the owner's operator is one whose
    # log the harness can find (DLRover's: it makes the job's first pod, so a job that never starts
    # is explained there).
    operator: ClassVar[OperatorLog | None] = None
    # Whether the owner's controllers delete a pod once it has ended (DLRover's master deletes its
    # succeeded workers): the job then captures each pod's log as it ends, not only at teardown.
    deletes_finished_pods: ClassVar[bool] = False

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        raise NotImplementedError

    def owners(self, workload: Workload, placement: Placement) -> list[str]:
        """The names of the owner objects."""
        return [workload.job_name]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        raise NotImplementedError

    def worker_selector(self, workload: Workload) -> str:
        """The label selector of the job's pods that run ranks (the job's pods, unless the launcher
        adds one that runs none beside them: a DLRover master)."""
        return job_selector(workload.job_name)

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


class JobPerNode(Launcher):
    """A launcher whose owners are a Job per node of the placement, named `<job>-<node>`."""

    def owners(self, workload: Workload, placement: Placement) -> list[str]:
        return [job_name for job_name, _ in self.jobs(workload, placement)]

    def jobs(self, workload: Workload, placement: Placement) -> list[tuple[str, str]]:
        """(Job name, node) for each node of the placement."""
        return [(f"{workload.job_name}-{node}"[:63].rstrip("-."), node) for node in placement.node_names]


def worker_index(pod: Obj) -> int | None:
    """The worker's index among the job's workers, None for a pod that runs no rank: an Indexed
    Job's (and JobSet's) completion index; a DLRover worker's rank label, which its relaunched pod
    keeps (its name's number is a new node id); an MPIJob worker's name suffix."""
    meta = pod["metadata"]
    index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
    if index is None and pod_role(pod) == "worker":
        index = (meta.get("labels") or {}).get(DLROVER_RANK_LABEL)
    if index is None:
        match = re.search(r"-worker-(\d+)$", meta["name"])
        index = match.group(1) if match else None
    return int(index) if index is not None and index.isdigit() else None


def rank_locations(pods: list[Obj], processes_per_node: int) -> dict[int, tuple[str, str]]:
    """rank -> (pod, node): torchrun puts ranks [i*P, (i+1)*P) on index i; mpirun -map-by slot
    fills worker i's slots in order (JobSet's pods carry the completion index too; DLRover's
    workers their rank). Pods being deleted are left out; of two pods of one index the newer counts."""
    workers: dict[int, Obj] = {}
    for pod in pods:
        meta = pod["metadata"]
        index = worker_index(pod)
        if index is None or meta.get("deletionTimestamp"):
            continue
        # A replaced pod (a JobSet restart, a Job's retry) and its replacement: the newer ran last.
        held = workers.get(index)
        if held is None or meta.get("creationTimestamp", "") >= held["metadata"].get("creationTimestamp", ""):
            workers[index] = pod
    return {index * processes_per_node + local: (pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?"))
            for index, pod in workers.items() for local in range(processes_per_node)}
