"""nanoGPT-style GPT training with DDP or FSDP, gradient accumulation, checkpoints and elastic resume.

Trains a char-level GPT on a small Shakespeare text shipped in the package (nothing is downloaded)
and prints nanoGPT's `iter N: loss X, time Yms, mfu Z%` lines on rank 0; every rank prints the
KT2T_STEP and KT2T_METRICS lines of workloads/metric_lines.py.
Sizes from 0.1M parameters (tiny) to GPT-2 XL's 1.5B; before building the model rank 0 prints
the memory plan that chose DDP or FSDP (workloads/sharding.py), and `--plan` prints it alone.
Run: torchrun --nproc_per_node=N -m workloads.nanogpt --size tiny --checkpoint-dir /ckpt
     python -m workloads.nanogpt --size gpt2-xl --plan --plan-world-size 16 --plan-device-gib 80
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import torch

from workloads import checkpoint, hardware, sharding
from workloads.distributed import Session, data_parallel
from workloads.gpt import GPT, GPTConfig
from workloads.metric_lines import Reporter, params_checksum, say
from workloads.probe import compute_window
from workloads.program import new_parser, run_main, workload_main

# tiny-shakespeare's 65 symbols: a fixed vocabulary, so the first loss is ln(65) = 4.17 whatever
# text is used, and char ids are the same as in nanoGPT's shakespeare_char.
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
TEXT_RESOURCE = "shakespeare.txt"
MFU_WARMUP_ITERS = 5  # nanoGPT's: the first iterations carry compile and allocator warm-up


@dataclass(frozen=True)
class GPTSize:
    model: GPTConfig
    batch_size: int
    grad_accum: int
    max_iters: int
    lr: float
    warmup_iters: int


SIZES: dict[str, GPTSize] = {
    "tiny": GPTSize(GPTConfig(2, 2, 64, 64, len(CHARS)), 8, 2, 60, 3e-3, 5),
    # The bench configuration (nanoGPT train.py at n_layer 4, n_head 4, n_embd 256, block 256).
    "small": GPTSize(GPTConfig(4, 4, 256, 256, len(CHARS)), 8, 1, 200, 1e-3, 20),
    # GPT-2 124M as nanoGPT trains it (vocab padded to 50304 for tensor-core friendly shapes);
    # the text's 65 chars use the first ids, so the first loss is ln(50304) and falls fast.
    "gpt2": GPTSize(GPTConfig(12, 12, 768, 1024, 50304), 12, 5, 50, 6e-4, 10),
    # GPT-2 medium, large and XL: nanoGPT's model.py from_pretrained shapes (350M, 774M, 1558M with
    # its biases and vocab 50257; 354.6M, 773.6M and 1556.8M here). Learning rates from GPT-3's
    # table 2.1 (Brown et al. 2020) for the nearest sizes (350M, 760M, 1.3B); micro-batches halve
    # as the model grows so a replica fits an 80 GB GPU under DDP, FSDP where it does not.
    "gpt2-medium": GPTSize(GPTConfig(24, 16, 1024, 1024, 50304), 8, 8, 50, 3e-4, 10),
    "gpt2-large": GPTSize(GPTConfig(36, 20, 1280, 1024, 50304), 4, 16, 50, 2.5e-4, 10),
    "gpt2-xl": GPTSize(GPTConfig(48, 25, 1600, 1024, 50304), 2, 32, 50, 2e-4, 10),
}


def load_tokens() -> torch.Tensor:
    text = resources.files("workloads").joinpath(TEXT_RESOURCE).read_text(encoding="utf-8")
    index = {c: i for i, c in enumerate(CHARS)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


def get_batch(
    data: torch.Tensor, block_size: int, batch_size: int, seed: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the text; the seed encodes (iteration, rank, micro-step) so that a resumed
    run sees exactly the batches the interrupted one would have seen."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([data[s : s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts.tolist()])
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def lr_at(it: int, args: argparse.Namespace) -> float:
    """nanoGPT's schedule: linear warm-up, cosine decay to lr/10 at max_iters."""
    min_lr = args.lr / 10
    if it < args.warmup_iters:
        return args.lr * (it + 1) / (args.warmup_iters + 1)
    ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))) * (args.lr - min_lr)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = new_parser("workloads.nanogpt", __doc__, precision=True)
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--n-layer", type=int)
    parser.add_argument("--n-head", type=int)
    parser.add_argument("--n-embd", type=int)
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--vocab-size", type=int, help=f"at least {len(CHARS)} (the text's symbols)")
    parser.add_argument("--batch-size", type=int, help="micro-batch per rank")
    parser.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step, per rank")
    parser.add_argument("--max-iters", type=int, help="optimizer steps in total (a resumed run stops there too)")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--warmup-iters", type=int)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--grad-clip", type=float, default=1.0, help="0 disables clipping")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (pays off on GPU)")
    parser.add_argument("--log-interval", type=int, default=1)
    parser.add_argument("--checkpoint-dir", type=Path, help="save here and resume from the latest checkpoint")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: never)")
    parser.add_argument(
        "--fail-at-step",
        type=int,
        help="fault injection: --fail-rank exits non-zero before this step, on the first attempt only "
        "(TORCHELASTIC_RESTART_COUNT=0), to exercise elastic recovery",
    )
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--sharding", choices=sharding.STRATEGIES, default="auto",
                        help="ddp: a replica a rank; fsdp: shards (FSDP2); auto: DDP when the memory plan "
                        "fits a replica in the device, else FSDP")
    parser.add_argument("--plan", action="store_true",
                        help="print the parameter count and the memory plan, train nothing")
    parser.add_argument("--plan-world-size", type=int, help="--plan: ranks to plan for (default WORLD_SIZE, else 1)")
    parser.add_argument("--plan-device-gib", type=float,
                        help="--plan: a device's memory in GiB (e.g. 80 for an H100; default this machine's)")
    args = parser.parse_args(argv)

    size = SIZES[args.size]
    overrides = {
        "n_layer": args.n_layer,
        "n_head": args.n_head,
        "n_embd": args.n_embd,
        "block_size": args.block_size,
        "vocab_size": args.vocab_size,
    }
    model = asdict(size.model) | {k: v for k, v in overrides.items() if v is not None}
    if model["vocab_size"] < len(CHARS):
        parser.error(f"--vocab-size must be at least {len(CHARS)}")
    args.model = GPTConfig(**model)
    for name in ("batch_size", "grad_accum", "max_iters", "lr", "warmup_iters"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(size, name))
    if args.checkpoint_every and args.checkpoint_dir is None:
        parser.error("--checkpoint-every needs --checkpoint-dir")
    if args.sharding == "fsdp" and args.checkpoint_dir is not None:
        parser.error("--checkpoint-dir with --sharding fsdp: checkpoints are whole-model files written by one "
                     "rank a node; sharded checkpoints are not built yet")
    return args


def maybe_inject_failure(args: argparse.Namespace, session: Session, step: int) -> None:
    if args.fail_at_step != step or session.env.rank != args.fail_rank or session.env.restart_count != 0:
        return
    print(
        f"rank {session.env.rank}: injected failure before step {step} (--fail-at-step, first attempt only)",
        file=sys.stderr,
        flush=True,
    )
    # _exit: a crash does not run cleanup; the peers learn of it from the launcher, as in real life.
    os._exit(17)


@dataclass
class GPTRun:
    """One rank's model, optimizer and data, and how a step's micro-batches are drawn."""

    args: argparse.Namespace
    session: Session
    precision: str
    data: torch.Tensor
    model: GPT
    wrapped: torch.nn.Module  # what computes: DistributedDataParallel, or the FSDP-sharded model
    optimizer: torch.optim.Optimizer
    plan: sharding.MemoryPlan

    def accumulate_gradients(self, step: int, *, sync: bool) -> float:
        """Forward+backward over the step's micro-batches; all-reduce on the last one when sync."""
        args, device = self.args, self.session.device
        for micro in range(args.grad_accum):
            # Reduce gradients only on the last micro-step; earlier ones just accumulate.
            sharding.set_gradient_sync(self.wrapped, sync and micro == args.grad_accum - 1)
            seed = ((args.seed * 1_000_003 + step) * 4099 + self.session.env.rank) * 257 + micro
            x, y = get_batch(self.data, args.model.block_size, args.batch_size, seed, device)
            with hardware.autocast(device, self.precision):
                loss = self.wrapped(x, y) / args.grad_accum
            loss.backward()
        return loss.item() * args.grad_accum  # .item() waits for the GPU: a step's time is real

    def train_step(self, step: int) -> float:
        """One optimizer step at the schedule's learning rate; returns the last micro-batch's loss."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(step, self.args)
        loss = self.accumulate_gradients(step, sync=True)
        if self.args.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def save_checkpoint(self, step: int) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": step,
            "model_config": asdict(self.args.model),
        }
        checkpoint.save(self.args.checkpoint_dir, step, state)
        say(f"saved checkpoint at step {step}")


def resume(args: argparse.Namespace, session: Session, model: GPT, optimizer: torch.optim.Optimizer) -> int | None:
    """Load the newest checkpoint any rank holds into model and optimizer; its step, or None."""
    if args.checkpoint_dir is None:
        return None
    state = checkpoint.load_latest_everywhere(args.checkpoint_dir)
    if state is None:
        return None
    if state["model_config"] != asdict(args.model):
        raise ValueError(f"checkpoint in {args.checkpoint_dir} is for another model: {state['model_config']}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if session.is_main:
        say(f"resumed from step {state['step']}")
    return int(state["step"])


def build(args: argparse.Namespace, session: Session) -> tuple[GPTRun, int | None]:
    """The rank's run, resumed from the newest checkpoint when there is one; and that step."""
    device = session.device
    hardware.allow_tf32(device)
    torch.manual_seed(args.seed)
    data = load_tokens()
    if len(data) <= args.model.block_size + 1:
        raise ValueError(f"block_size {args.model.block_size} is longer than the text ({len(data)} chars)")
    precision = hardware.resolve_precision(args.precision, device)
    plan = sharding.plan_memory(sharding.meta_model(args.model), args.batch_size, session.env.world_size, precision,
                                sharding.device_memory_bytes(device, session.env.local_world_size), args.sharding)
    if session.is_main:
        say(plan.line())
    if plan.strategy == "fsdp" and args.checkpoint_dir is not None:
        raise sharding.PlanError(f"the memory plan chose FSDP ({plan.why}) but --checkpoint-dir needs a replica a "
                                 "rank (sharded checkpoints are not built yet): use more memory per rank or a "
                                 "smaller --size")
    model = GPT(args.model).to(device)
    if plan.strategy == "fsdp":
        # FSDP2 replaces the parameters with shards: the optimizer must be built over those.
        sharding.fully_shard_gpt(model)
    optimizer = hardware.adamw(model.optimizer_groups(args.weight_decay), device, lr=args.lr, betas=(0.9, 0.95))
    resumed_from = resume(args, session, model, optimizer)
    if plan.strategy == "fsdp":
        wrapped: torch.nn.Module = torch.compile(model) if args.compile else model
    else:
        # Compile the bare model, then wrap: DDP hooks stay outside the graph (nanoGPT's order).
        wrapped = data_parallel(torch.compile(model) if args.compile else model, session)
    return GPTRun(args, session, precision, data, model, wrapped, optimizer, plan), resumed_from


def iter_line(step: int, loss: float, ms: float, mfu: float | None) -> str:
    """nanoGPT's progress line (rank 0): `iter N: loss X, time Yms, mfu Z%`, `mfu n/a` without a peak."""
    mfu_text = "n/a" if mfu is None else f"{mfu * 100:.2f}%"
    return f"iter {step}: loss {loss:.4f}, time {ms:.2f}ms, mfu {mfu_text}"


def train(args: argparse.Namespace, session: Session, reporter: Reporter) -> None:
    run, resumed_from = build(args, session)
    # Seeds of step -1 are never trained on: the probe's batches are not the training's.
    # FSDP cannot compute without its collectives (a block's weights are all-gathered), and gradients it
    # accumulates unsynced stay in unsharded buffers that zero_grad() does not clear, so they would leak
    # into the first step: under FSDP the window reduces its gradients, and its time includes that.
    sync_window = run.plan.strategy == "fsdp"
    compute = compute_window(run.wrapped, lambda: run.accumulate_gradients(-1, sync=sync_window), session.device)
    reporter.steps_requested = args.max_iters
    peak = hardware.device_peak_flops(session.device)
    tokens_per_iter = args.batch_size * args.grad_accum * args.model.block_size
    flops_per_iter = run.model.flops_per_token() * tokens_per_iter
    iter_times: list[float] = []
    running_mfu: float | None = None
    step = resumed_from or 0
    while step < args.max_iters:
        maybe_inject_failure(args, session, step)
        t0 = time.perf_counter()
        lossf = run.train_step(step)
        dt = time.perf_counter() - t0
        iter_times.append(dt)
        reporter.step(step, lossf, dt * 1000, lr=lr_at(step, args))
        mfu = flops_per_iter / dt / peak if peak else None
        if mfu is not None and len(iter_times) > MFU_WARMUP_ITERS:
            running_mfu = mfu if running_mfu is None else 0.9 * running_mfu + 0.1 * mfu
        shown = running_mfu if running_mfu is not None else mfu
        if session.is_main and step % args.log_interval == 0:
            say(iter_line(step, lossf, dt * 1000, shown))
        step += 1
        # One writer per node (local rank 0): a copy survives on every node, whichever is lost.
        if args.checkpoint_every and step % args.checkpoint_every == 0 and session.env.local_rank == 0:
            run.save_checkpoint(step)

    # Steady state: leave out nanoGPT's warm-up iterations when there are enough to spare.
    timed = iter_times[MFU_WARMUP_ITERS:] if len(iter_times) > 2 * MFU_WARMUP_ITERS else iter_times
    sec_per_iter = sum(timed) / len(timed) if timed else float("nan")
    reporter.finish(
        {
            "size": args.size,
            "sharding": run.plan.strategy,
            "memory_plan_bytes": run.plan.estimate_bytes,
            "precision": run.precision,
            "compiled": args.compile,
            "tokens_per_s": tokens_per_iter / sec_per_iter,
            "ms_per_iter": sec_per_iter * 1000,
            **compute,
            "mfu": flops_per_iter / sec_per_iter / peak if peak else None,
            "peak_flops": peak,
            "loss_expected_first": math.log(args.model.vocab_size),
            "resumed_from_step": resumed_from,
            "iterations": len(iter_times),
            "final_step": step,
            # Under FSDP no rank holds a replica: the sum over the shards, the same on every rank.
            "params_checksum": params_checksum(run.model.parameters()) if run.plan.strategy == "ddp"
            else sharding.sharded_checksum(run.model),
        }
    )


def print_plan(args: argparse.Namespace) -> int:
    """--plan: the size's parameter counts and its memory plan for --plan-world-size ranks on a device
    of --plan-device-gib (this machine's when unset); nothing is allocated or trained."""
    world_size = args.plan_world_size or int(os.environ.get("WORLD_SIZE") or 1)
    if args.plan_device_gib is not None:
        device_bytes: int | None = int(args.plan_device_gib * sharding.GIB)
        precision = "bf16" if args.precision == "auto" else args.precision  # every GPU with a floor has bf16
    else:
        device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
        device_bytes = sharding.device_memory_bytes(device, 1)
        precision = hardware.resolve_precision(args.precision, device)
    model = sharding.meta_model(args.model)
    say(f"{args.size}: {model.num_params(non_embedding=False) / 1e6:.2f}M parameters "
        f"({model.num_params() / 1e6:.2f}M without position embeddings, nanoGPT's count); "
        f"training FLOPs {model.flops_per_token():.4g} a token")
    plan = sharding.plan_memory(model, args.batch_size, world_size, precision, device_bytes, args.sharding)
    say(plan.line())
    return 0


_train_main = workload_main("nanogpt", parse_args, train)


def main(argv: list[str] | None = None) -> int:
    """Train (under torchrun, mpirun or alone), or with --plan print the plan only."""
    args = parse_args(argv)
    return print_plan(args) if args.plan else _train_main(argv)

if __name__ == "__main__":
    run_main("workloads.nanogpt", main)
