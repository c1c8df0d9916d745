"""Distributed setup shared by every workload: ranks from torchrun or OpenMPI, device and backend."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

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


def _visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def read_env(env: Mapping[str, str] | None = None) -> DistEnv:
    """Read the rank layout from torchrun's or OpenMPI's variables.

    torchrun wins when both are present (mpirun may launch torchrun). With neither, the process
    runs alone (world size 1), which is what `python -m workloads.x` on a laptop wants.
    """
    env = os.environ if env is None else env
    gpus_raw = env.get("NUM_GPUS_PER_NODE")
    gpus_per_node = _int_var(env, "NUM_GPUS_PER_NODE") if gpus_raw not in (None, "") else _visible_gpus()

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


def select_device(denv: DistEnv, requested: str = "auto") -> torch.device:
    """cuda:<local rank> when GPUs are present and wanted, else CPU.

    NUM_GPUS_PER_NODE=0 forces CPU, so a CPU-only cluster needs no extra flag.
    """
    use_cuda = requested == "cuda" or (requested == "auto" and denv.gpus_per_node > 0 and _visible_gpus() > 0)
    if not use_cuda:
        return torch.device("cpu")
    visible = _visible_gpus()
    if visible == 0:
        raise EnvError("--device cuda was asked for but no GPU is visible (check CUDA_VISIBLE_DEVICES)")
    if denv.local_rank >= visible:
        name = "LOCAL_RANK" if denv.launcher == "torchrun" else "OMPI_COMM_WORLD_LOCAL_RANK"
        raise EnvError(f"{name}={denv.local_rank} but only {visible} GPU(s) are visible on this node")
    return torch.device("cuda", denv.local_rank)


def backend_for(device: torch.device) -> str:
    """NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


@dataclass(frozen=True)
class Session:
    """An initialised process group and the device this rank computes on."""

    env: DistEnv
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.env.rank == 0


@contextmanager
def distributed_session(requested_device: str = "auto") -> Iterator[Session]:
    """Initialise the process group (NCCL on GPU, gloo on CPU) and always tear it down."""
    denv = read_env()
    device = select_device(denv, requested_device)
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
        yield Session(denv, device, backend)
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


def pod_name() -> str | None:
    """The pod, from POD_NAME (the harness's manifests pass it down); None outside Kubernetes."""
    return os.environ.get("POD_NAME") or None
