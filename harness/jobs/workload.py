"""What a job runs and where: the Workload a test asks for (program, arguments, image, launcher,
nodes), the Placement a launcher renders it onto (namespace, nodes, processes per node, image), and
the Rendering it makes of them (a manifests/ template and its fields)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Workload:
    """What a job runs in every process: `python -m <module> <args>`, or `<binary> <args>`."""

    job_name: str
    module: str | None = None
    args: tuple[str, ...] = ()
    binary: str | None = None  # a non-Python program (nccl-tests' all_reduce_perf)
    # torchrun --nnodes=1:N with c10d rendezvous and restarts (elastic recovery).
    elastic: bool = False
    max_restarts: int = 0
    image: str | None = None  # default: TRAINING_IMAGE
    launcher: str | None = None  # default: LAUNCHER
    nodes: int | None = None  # default: every node of the topology (a single-node variant uses 1)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # Host folders mounted read-only in the pods, mount path -> host path (daemonset, per-node launchers).
    host_paths: Mapping[str, str] = field(default_factory=dict)
    # Linux capabilities its program needs (per-node launcher; every other is dropped), each said why where declared.
    capabilities: tuple[str, ...] = ()
    # These nodes exactly (required node affinity on their hostnames), instead of the topology's first
    # `nodes`: TestNodePairs runs one job per pair of nodes.
    on_nodes: tuple[str, ...] | None = None
    # How long the test waits for the job, in seconds (default JOB_TIMEOUT): TestDcgmDiagnostics' hours.
    timeout: float | None = None
    # The per-node Jobs' activeDeadlineSeconds (default: the wait plus a minute, a backstop for pods
    # the harness could not delete); TestDcgmDiagnostics sets it a minute inside its wait, as upstream's.
    deadline_seconds: int | None = None
    # GPUs each per-node pod asks for (default: all of its node's): upstream's node checks and BERT
    # inference ask for 1 (or --gpuRequested).
    gpus: int | None = None
    # Pods of the job, all at once on its one node, one GPU each (shared-gpu launcher: GPU sharing tests).
    pods: int | None = None

    def __post_init__(self) -> None:
        if (self.module is None) == (self.binary is None):
            raise ValueError(f"workload {self.job_name}: give exactly one of module or binary")

    def program(self) -> list[str]:
        """The per-process command line (what mpirun starts on every slot)."""
        if self.module is not None:
            return ["python", "-m", self.module, *self.args]
        return [str(self.binary), *self.args]


@dataclass(frozen=True)
class Placement:
    """Where a job runs and what its objects carry: all that rendering needs."""

    namespace: str
    labels: Mapping[str, str]  # of every object of the job
    pod_annotations: Mapping[str, str]
    pod_env: Mapping[str, str]  # the caller's NCCL_*/FI_* variables
    node_type: str
    node_names: tuple[str, ...]
    processes_per_node: int
    efa_per_node: int
    accelerator: str
    image: str
    job_timeout: float
    # Taints the pods tolerate besides the GPU and EFA ones every pod tolerates (TOLERATIONS), as pod spec entries.
    extra_tolerations: tuple[Mapping[str, str], ...] = ()
    # The smallest allocatable CPU (cores) and memory (bytes) of the nodes: what GPU pods' requests derive from.
    node_allocatable_cpu: float = 0.0
    node_allocatable_memory: float = 0.0
    # The ClusterTrainingRuntime a TrainJob references (TRAINJOB_RUNTIME; trainjob launcher).
    trainjob_runtime: str = "torch-distributed"
    # IMAGE_PULL_POLICY: upstream, Always, IfNotPresent or Never (launchers.base.pull_policy)
    image_pull_policy: str = "upstream"

    @property
    def node_count(self) -> int:
        return len(self.node_names)

    @property
    def world_size(self) -> int:
        return self.node_count * self.processes_per_node


@dataclass(frozen=True)
class Rendering:
    """A template of manifests/ and its fields."""

    template: str
    fields: dict[str, Any]
    # What a launcher changes in each rendered object beyond the template's fields (nvidia-dra's
    # MPIJob: its workers claim GPUs and EFAs through ResourceClaims instead of device-plugin resources).
    patch: Callable[[dict[str, Any]], dict[str, Any]] | None = None
