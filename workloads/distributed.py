"""Distributed setup shared by every workload: ranks from torchrun or OpenMPI, device and backend."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# A collective that waits this long means a peer is gone; failing lets torchrun restart the job
# instead of hanging until the job's own deadline.
COLLECTIVE_TIMEOUT = timedelta(minutes=10)


class EnvError(Exception):
    """A launcher variable is missing or malformed; the message names the variable."""


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job, as the launcher described it."""

    launcher: str  # "torchrun", "openmpi" or "single" (no launcher variables at all)
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    gpus_per_node: int  # NUM_GPUS_PER_NODE, or what this node shows when it is unset
    restart_count: int  # TORCHELASTIC_RESTART_COUNT; 0 outside torchrun


def _int_var(env: Mapping[str, str], name: str, *, minimum: int = 0, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is not None:
            return default
        raise EnvError(f"{name} is not set")
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise EnvError(f"{name}={raw!r} must be >= {minimum}")
    return value


def visible_gpus() -> int:
    """GPUs this process can use (0 without CUDA): the `gpus_visible` of the metric lines."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def read_env(env: Mapping[str, str] | None = None) -> DistEnv:
    """Read the rank layout from torchrun's or OpenMPI's variables.

    torchrun wins when both are present (mpirun may launch torchrun). With neither, the process
    runs alone (world size 1), which is what `python -m workloads.x` on a laptop wants.
    """
    env = os.environ if env is None else env
    gpus_raw = env.get("NUM_GPUS_PER_NODE")
    gpus_per_node = _int_var(env, "NUM_GPUS_PER_NODE") if gpus_raw not in (None, "") else visible_gpus()

    if "RANK" in env or "WORLD_SIZE" in env or "LOCAL_RANK" in env:
        launcher = "torchrun"
        rank = _int_var(env, "RANK")
        world_size = _int_var(env, "WORLD_SIZE", minimum=1)
        local_rank = _int_var(env, "LOCAL_RANK")
        local_world_size = _int_var(env, "LOCAL_WORLD_SIZE", minimum=1, default=max(gpus_per_node, 1))
        rank_var, size_var = "RANK", "WORLD_SIZE"
    elif any(name.startswith("OMPI_COMM_WORLD_") for name in env):
        launcher = "openmpi"
        rank = _int_var(env, "OMPI_COMM_WORLD_RANK")
        world_size = _int_var(env, "OMPI_COMM_WORLD_SIZE", minimum=1)
        if env.get("OMPI_COMM_WORLD_LOCAL_RANK") not in (None, ""):
            local_rank = _int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK")
        elif gpus_per_node > 0:
            # What the upstream train.py did; only a fallback since mpirun always sets LOCAL_RANK.
            local_rank = rank % gpus_per_node
        else:
            raise EnvError("OMPI_COMM_WORLD_LOCAL_RANK is not set (and NUM_GPUS_PER_NODE gives no fallback)")
        local_world_size = _int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", minimum=1, default=max(gpus_per_node, 1))
        rank_var, size_var = "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"
    else:
        return DistEnv("single", 0, 0, 1, 1, gpus_per_node, 0)

    if rank >= world_size:
        raise EnvError(f"{rank_var}={rank} must be below {size_var}={world_size}")
    # init_method env:// needs both; checking here turns a torch ValueError traceback into one line.
    if not env.get("MASTER_ADDR"):
        raise EnvError("MASTER_ADDR is not set")
    _int_var(env, "MASTER_PORT", minimum=1)
    restart_count = _int_var(env, "TORCHELASTIC_RESTART_COUNT", default=0)
    return DistEnv(launcher, rank, local_rank, world_size, local_world_size, gpus_per_node, restart_count)


# ACCELERATOR, as the harness's manifests set it (harness/jobs/launchers): what the pods were given.
ACCELERATOR_VARIABLE = "ACCELERATOR"
# ACCELERATOR values -> the --device they mean. nvidia: CUDA required, never a silent CPU run.
ACCELERATORS = {"nvidia": "cuda", "cpu": "cpu", "auto": "auto"}


class AcceleratorError(EnvError):
    """The accelerator asked for is not usable here; the message names what is missing."""


def requested_accelerator(device_flag: str = "auto", env: Mapping[str, str] | None = None) -> str:
    """The device this process must use: "cuda", "cpu" or "auto", from --device and ACCELERATOR.

    --device auto defers to ACCELERATOR; unset or empty ACCELERATOR is "auto" (a laptop's
    `python -m workloads.x` sets nothing; the harness always sets it). An explicit --device that
    contradicts ACCELERATOR is an error: either could be the mistake, and guessing is how a GPU
    job ends up training on CPU.
    """
    env = os.environ if env is None else env
    raw = env.get(ACCELERATOR_VARIABLE) or "auto"
    if raw not in ACCELERATORS:
        raise EnvError(f"{ACCELERATOR_VARIABLE}={raw!r} is not one of {', '.join(ACCELERATORS)}")
    from_env = ACCELERATORS[raw]
    if device_flag == "auto":
        return from_env
    if from_env not in ("auto", device_flag):
        raise EnvError(f"--device {device_flag} contradicts {ACCELERATOR_VARIABLE}={raw} (device {from_env})")
    return device_flag


def cuda_visible_hint(env: Mapping[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES as this process sees them, for messages."""
    env = os.environ if env is None else env
    names = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
    return ", ".join(f"{name}={env.get(name, '<unset>')}" for name in names)


def gpus_required(denv: DistEnv, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """How many GPUs this node must show, and which variable says so: the processes the launcher
    put on it (local world size), or NUM_GPUS_PER_NODE when it is set and larger."""
    env = os.environ if env is None else env
    name = "LOCAL_WORLD_SIZE" if denv.launcher == "torchrun" else "OMPI_COMM_WORLD_LOCAL_SIZE"
    required, why = denv.local_world_size, f"{name}={denv.local_world_size} processes on this node"
    if denv.launcher == "single":
        why = "1 process"
    if env.get("NUM_GPUS_PER_NODE") not in (None, "") and denv.gpus_per_node > required:
        required, why = denv.gpus_per_node, f"NUM_GPUS_PER_NODE={denv.gpus_per_node}"
    return required, why


def require_cuda(denv: DistEnv, env: Mapping[str, str] | None = None) -> torch.device:
    """cuda:<local rank>, or AcceleratorError naming what is missing: CUDA itself (a CPU-only torch,
    or no driver/device in the container), GPUs (fewer visible than this node's ranks need), or
    this rank's own device (its local rank has none, or it fails its first allocation)."""
    if torch.version.cuda is None:
        raise AcceleratorError(
            f"CUDA is required (ACCELERATOR=nvidia or --device cuda) but this torch {torch.__version__} is a "
            "CPU-only build: the image has no CUDA torch"
        )
    if not torch.cuda.is_available():
        raise AcceleratorError(
            f"CUDA is required (ACCELERATOR=nvidia or --device cuda) but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}; {cuda_visible_hint(env)}): no usable NVIDIA "
            "GPU in this container; probably the NVIDIA driver is missing or too old on the node, no GPU device "
            "was given to the container (nvidia.com/gpu not allocated: the device plugin or the runtime), or "
            "the GPU is in a failed state"
        )
    visible = torch.cuda.device_count()
    required, why = gpus_required(denv, env)
    if visible < required:
        raise AcceleratorError(
            f"{why} need {required} GPUs but torch.cuda.device_count() is {visible} ({cuda_visible_hint(env)}): "
            "fewer GPUs are visible than requested"
        )
    name = {"torchrun": "LOCAL_RANK", "openmpi": "OMPI_COMM_WORLD_LOCAL_RANK"}.get(denv.launcher, "local rank")
    if denv.local_rank >= visible:
        raise AcceleratorError(
            f"{name}={denv.local_rank} has no GPU: torch.cuda.device_count() is {visible} ({cuda_visible_hint(env)})"
        )
    device = torch.device("cuda", denv.local_rank)
    try:
        # is_available() only counts devices; the first allocation is where a broken one fails.
        torch.zeros(1, device=device)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AcceleratorError(f"{name}={denv.local_rank}: GPU {device} is visible but unusable: {first}") from None
    return device


def select_device(denv: DistEnv, requested: str = "auto", env: Mapping[str, str] | None = None) -> torch.device:
    """The device for `requested` ("cuda", "cpu" or "auto", see requested_accelerator).

    cuda: require_cuda (CUDA or a named error, never CPU). cpu: CPU. auto: cuda:<local rank> when
    GPUs are visible and NUM_GPUS_PER_NODE is not 0, else CPU; kept for runs outside the harness
    (a laptop, bench/), which say nothing, and reported as `accelerator: "auto"` so a verdict can
    tell such a run from one that was asked for a GPU.
    """
    if requested == "cuda" or (requested == "auto" and denv.gpus_per_node > 0 and visible_gpus() > 0):
        return require_cuda(denv, env)
    if requested not in ("cpu", "auto"):
        raise EnvError(f"device {requested!r} is not one of cuda, cpu, auto")
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass(frozen=True)
class Session:
    """An initialised process group and the device this rank computes on."""

    env: DistEnv
    device: torch.device
    backend: str
    accelerator: str = "auto"  # what was asked for: "cuda", "cpu" or "auto" (requested_accelerator)

    @property
    def is_main(self) -> bool:
        return self.env.rank == 0


@contextmanager
def distributed_session(requested_device: str = "auto") -> Iterator[Session]:
    """Initialise the process group (NCCL on GPU, gloo on CPU) and always tear it down.

    requested_device is --device; ACCELERATOR refines it (requested_accelerator). The device is
    checked before the process group exists, so a rank without its GPU fails at once, alone,
    with a message rather than after a rendezvous timeout.
    """
    denv = read_env()
    accelerator = requested_accelerator(requested_device)
    device = select_device(denv, accelerator)
    backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if denv.launcher == "single":
        # A private in-memory store: no port to pick, nothing to collide with.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group(
            backend,
            init_method="env://",
            rank=denv.rank,
            world_size=denv.world_size,
            timeout=COLLECTIVE_TIMEOUT,
            # Binding the device makes NCCL connect eagerly and keeps barrier() off GPU 0.
            device_id=device if device.type == "cuda" else None,
        )
    try:
        yield Session(denv, device, backend, accelerator)
    finally:
        dist.destroy_process_group()


def data_parallel(module: torch.nn.Module, session: Session) -> DistributedDataParallel:
    """DDP on this rank's device (device_ids only for CUDA, where DDP needs to know the GPU)."""
    device_ids = [session.device.index] if session.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids)


def mean_over_ranks(value: float, session: Session) -> float:
    """The true mean of a per-rank scalar (the upstream script printed rank 0's own value)."""
    t = torch.tensor([value], dtype=torch.float64, device=session.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item()) / session.env.world_size


def node_name() -> str:
    """The Kubernetes node when the pod spec passes it down, else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def host_boot_id() -> str | None:
    """The running kernel's boot id: one per host (a VM or a machine), the same in every container and
    network namespace on it, so ranks on nodes that report the same id share one host's CPUs (the local
    cluster's real nodes do). None where the kernel does not say (not Linux)."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def pod_name() -> str | None:
    """The pod, from POD_NAME (the harness's manifests pass it down); None outside Kubernetes."""
    return os.environ.get("POD_NAME") or None
