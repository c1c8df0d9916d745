"""How a GPT is spread over the ranks: replicated (DDP) when one device holds a replica's training
state, sharded (FSDP) when it does not, chosen from a memory estimate the run prints.

The estimate counts what training keeps per rank (bytes, one micro-batch in flight):
- state: fp32 weights, gradients and AdamW's two moments, 16 bytes a parameter; DDP adds its
  gradient buckets (a second fp32 copy of the gradients, 4 bytes), bf16 autocast its cached bf16
  copies of the weights (2 bytes). FSDP keeps 16/world_size bytes a parameter plus the units it has
  all-gathered: the root (embeddings, final norm) and two blocks (the one computing and the one
  prefetched), each as fp32 weights and gradients.
- activations: 34 bytes per layer, token and hidden unit at 16 bits (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", eq. 1, without its 5as/h term:
  scaled_dot_product_attention keeps no T x T score matrix), twice that in fp32; plus the logits,
  bf16 (2), their fp32 upcast for the loss (4) and its gradient (4): 10 bytes a token and vocabulary
  entry (12 in fp32).
A plan uses at most USABLE_FRACTION of the device's memory: the CUDA context, NCCL's buffers and
the allocator's fragmentation take the rest. On CPU the ranks of a node share the host's memory
(the cgroup's limit where one is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from workloads.gpt import GPT, GPTConfig
from workloads.metric_lines import params_checksum

STATE_BYTES = 16  # fp32 weight + gradient + AdamW exp_avg + exp_avg_sq
DDP_BUCKET_BYTES = 4  # DDP's reducer buckets: a second fp32 gradient (gradient_as_bucket_view off)
AUTOCAST_COPY_BYTES = 2  # bf16 copies of the weights that autocast caches during a forward
UNSHARDED_BYTES = 8  # an all-gathered FSDP unit: fp32 weights and their gradients
ACTIVATION_BYTES = 34  # per layer x token x hidden, 16-bit (Korthikanti et al. 2022, eq. 1)
LOGIT_BYTES = {"bf16": 10, "fp32": 12}  # per token x vocabulary entry: logits, fp32 upcast, gradient
USABLE_FRACTION = 0.85
STRATEGIES = ("auto", "ddp", "fsdp")
CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")
MEMINFO = Path("/proc/meminfo")
GIB = 2**30


def meta_model(cfg: GPTConfig) -> GPT:
    """The GPT built on the meta device: the real modules, nothing allocated, so counting gpt2-xl's
    parameters costs nothing on a laptop."""
    with torch.device("meta"):
        return GPT(cfg)


@dataclass(frozen=True)
class MemoryPlan:
    """The estimate for one rank and what it chose."""

    params: int
    world_size: int
    micro_batch: int
    precision: str
    ddp_bytes: int
    fsdp_bytes: int
    device_bytes: int | None  # the rank's device (its share of the host on CPU), None when unknown
    strategy: str  # "ddp" or "fsdp"
    why: str

    @property
    def estimate_bytes(self) -> int:
        return self.fsdp_bytes if self.strategy == "fsdp" else self.ddp_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the chosen strategy's estimate is within the usable memory; None when unknown."""
        return None if self.device_bytes is None else self.estimate_bytes <= self.device_bytes * USABLE_FRACTION

    def line(self) -> str:
        """The line the run prints (rank 0) before it builds the model."""
        if self.device_bytes is None:
            device = "the device's memory is unknown"
        else:
            device = (f"a rank may use {self.device_bytes * USABLE_FRACTION / GIB:.1f} GiB "
                      f"({USABLE_FRACTION:.0%} of {self.device_bytes / GIB:.1f} GiB)")
        ranks = f"{self.world_size} rank{'s' if self.world_size != 1 else ''}"
        return (f"memory plan: {self.params / 1e6:.2f}M parameters, micro-batch {self.micro_batch}, "
                f"{self.precision}, {ranks}: DDP needs {self.ddp_bytes / GIB:.2f} GiB a rank, "
                f"FSDP {self.fsdp_bytes / GIB:.2f} GiB; {device}: {self.strategy} ({self.why})")


class PlanError(ValueError):
    """A strategy that cannot be had; the message says why."""


def activation_bytes(cfg: GPTConfig, micro_batch: int, precision: str) -> int:
    tokens = micro_batch * cfg.block_size
    per_layer = ACTIVATION_BYTES * (2 if precision == "fp32" else 1) * tokens * cfg.n_embd
    return cfg.n_layer * per_layer + LOGIT_BYTES[precision] * tokens * cfg.vocab_size


def plan_memory(model: GPT, micro_batch: int, world_size: int, precision: str, device_bytes: int | None,
                requested: str = "auto") -> MemoryPlan:
    """Estimate both strategies for `model` (its meta_model is enough) and choose: `requested` when it
    is ddp or fsdp, else DDP when a replica fits, FSDP when only shards do (and there is more than one
    rank). When neither fits it stays DDP, as a run without a plan would, and says so: the estimate
    errs high (no activation is freed early), so it warns rather than refuses, and an out-of-memory
    error would confirm it."""
    if requested not in STRATEGIES:
        raise PlanError(f"sharding {requested!r} is not one of {', '.join(STRATEGIES)}")
    cfg = model.config
    params = model.num_params(non_embedding=False)
    activations = activation_bytes(cfg, micro_batch, precision)
    autocast = AUTOCAST_COPY_BYTES if precision == "bf16" else 0
    ddp = params * (STATE_BYTES + DDP_BUCKET_BYTES + autocast) + activations
    # FSDP's units (fully_shard_gpt): each block, and the root's own wte (= the tied lm_head), wpe, ln_f.
    block = sum(p.numel() for p in model.blocks[0].parameters())
    root = params - cfg.n_layer * block
    fsdp = params * STATE_BYTES // world_size + UNSHARDED_BYTES * (root + 2 * block) + activations

    def plan(strategy: str, why: str) -> MemoryPlan:
        return MemoryPlan(params, world_size, micro_batch, precision, ddp, fsdp, device_bytes, strategy, why)

    if requested != "auto":
        return plan(requested, "asked for (--sharding)")
    if device_bytes is None:
        return plan("ddp", "DDP unless asked: the device's memory is unknown")
    usable = device_bytes * USABLE_FRACTION
    if ddp <= usable:
        return plan("ddp", "a replica fits")
    if world_size > 1 and fsdp <= usable:
        return plan("fsdp", f"a replica does not fit, a 1/{world_size} shard does")
    return plan("ddp", "neither fits by this estimate: DDP as without a plan; if it runs out of memory, use "
                       "more ranks (FSDP divides the training state by them), a smaller --batch-size or --size")


def device_memory_bytes(device: torch.device, local_world_size: int) -> int | None:
    """The memory one rank may use: its GPU's, or on CPU the host's (the cgroup's limit when set)
    divided among the node's ranks."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    host = host_memory_bytes()
    return None if host is None else host // max(local_world_size, 1)


def host_memory_bytes() -> int | None:
    """The cgroup v2 memory.max of this process when it is a number, else MemTotal; None if neither."""
    try:
        limit = CGROUP_MEMORY_MAX.read_text().strip()
        if limit.isdigit():
            return int(limit)
    except OSError:
        pass
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def fully_shard_gpt(model: GPT) -> nn.Module:
    """FSDP2 (torch.distributed.fsdp.fully_shard) over each block, then the root: a block's weights
    are gathered only while it computes. The tied wte/lm_head weight stays in the root unit."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def set_gradient_sync(module: nn.Module, sync: bool) -> None:
    """Whether the next backward reduces gradients across ranks (DDP's all-reduce, FSDP's
    reduce-scatter): off for gradient accumulation's early micro-batches."""
    module = getattr(module, "_orig_mod", module)  # torch.compile's wrapper of an FSDP model
    if isinstance(module, DistributedDataParallel):
        module.require_backward_grad_sync = sync
    elif hasattr(module, "set_requires_gradient_sync"):  # an FSDP2 module
        module.set_requires_gradient_sync(sync)


def sharded_checksum(model: nn.Module) -> float:
    """Sum of every parameter in float64 across the shards: each rank sums its own shard and the sums
    are all-reduced, so every rank reports the model's one sum (FSDP keeps no replica to compare)."""
    local = params_checksum(p.to_local() if hasattr(p, "to_local") else p for p in model.parameters())
    total = torch.tensor(local, dtype=torch.float64, device=next(model.parameters()).device)
    dist.all_reduce(total)
    return float(total.item())
