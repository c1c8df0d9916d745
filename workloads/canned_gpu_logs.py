"""The canned GPU logs of the training workloads, written by the workloads' own reporting code.

    PYTHONPATH=. python hack/canned_gpu_logs.py            # (re)write localcluster/emulation/canned_logs
    PYTHONPATH=. python hack/canned_gpu_logs.py --check    # exit 1 when a file differs from what it would write

One log per torchrun pod (one pod per node, 8 ranks a node), `<workload>-<shape>-<variant>-<index>.log`,
served to the pod of index i by the annotation
`kubetest2-training.local/canned-log: <workload>-<shape>-<variant>-{index}` on the local cluster's kwok
p5/p3 nodes (`hack/local-cluster nodes --shape p5`). The lines are printed by the workloads' own
reporting code (metric_lines.Reporter, bert.upstream_lines, nanogpt.iter_line, mnist.epoch_line) fed
with numbers derived from the throughput floors' anchors (ANCHORS below), not measured: every file
starts with a `# CANNED OUTPUT` line saying so. Variants: `healthy`, and `straggler`: node 1 computes
at STRAGGLER_SPEED of the others (probe and compute window), and, DDP being synchronous, every rank's
step time and throughput follow the slow node.

It lives here, not in the local cluster, because it runs this package's code (the local cluster may
not import the workloads); the local cluster only serves the files. The folder it writes is the
caller's (`--out`; hack/canned_gpu_logs.py passes the local cluster's).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from . import bert, hardware, metric_lines, mnist, nanogpt, sharding
from .distributed import DistEnv, Session
from .flops import table
from .probe import PROBE_REPEATS, spread

NODES = 2  # the local cluster's default node count (KT2T_NODE_COUNT)
GPUS = 8  # per node: p5.48xlarge and p3.16xlarge
# 0.6, not 0.7: a node at 0.7x would sit exactly on the verdict's STRAGGLER_FRACTION (0.7) and be
# judged either way by the jitter; 0.6x (a 40% slower node) is one the check must name.
STRAGGLER_SPEED = 0.6
SLOW_NODE = 1
STEP_COMPUTE_SHARE = 0.85  # of a step's time; the rest is the all-reduce DDP could not overlap
COMPUTE_WINDOW_S = 2.0  # workloads/probe.py MATMUL_SECONDS: the compute window's default length


@dataclass(frozen=True)
class Shape:
    name: str
    node_type: str
    gpu_name: str  # torch.cuda.get_device_name()
    peak: float  # FLOP/s in the precision the workloads train in there (/work/notes/floors-draft.yaml peaks)
    precision: str
    probe_tflops: float  # the matmul probe at n=8192 in probe_dtype
    probe_dtype: str
    h2d_gbps: float
    gpu_memory_bytes: int  # the GB in the GPU's name: what the memory plan is made for


SHAPES = {
    # H100 SXM: 989 TFLOP/s dense bf16 (nanoGPT pull 464); the probe at ~75% of it, PCIe 5 x16 H2D.
    "p5": Shape("p5", "p5.48xlarge", "NVIDIA H100 80GB HBM3", 989e12, "bf16", 740.0, "bfloat16", 52.0, 80 * 10**9),
    # V100 SXM2: no native bf16, so the workloads train fp32 (15 TFLOP/s) and probe fp16 tensor cores
    # (125 TFLOP/s peak, ~80% reached); PCIe 3 x16 H2D.
    "p3": Shape("p3", "p3.16xlarge", "Tesla V100-SXM2-16GB", 15e12, "fp32", 100.0, "float16", 11.5, 16 * 10**9),
}
# The MFU each workload is assumed to reach on a healthy node (twice the draft floor's minimum, or the
# published anchor itself): bert fp32 5.6% is upstream's measured p3 run (aws-k8s-tester pull 467);
# nanoGPT GPT-2 on H100 33% (nanoGPT pull 464). MNIST has no FLOPs anchor (its step is bound by
# Lightning's loop, not FLOPs): its step time is an assumption, MNIST_STEP_MS.
ANCHORS = {("bert", "bf16"): 0.03, ("bert", "fp32"): 0.056, ("nanogpt", "bf16"): 0.33, ("nanogpt", "fp32"): 0.08}
MNIST_STEP_MS = {"p5": 3.0, "p3": 4.5}
SIZES = {"bert": "base", "nanogpt": "gpt2", "mnist": "full"}  # sizes with a floor (mnist has none at all)


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    node: str
    pod: str
    speed: float  # 1.0, or STRAGGLER_SPEED on the slow node


def ranks(workload: str, shape: Shape, variant: str) -> list[Rank]:
    job = f"{workload}-training"
    return [Rank(n * GPUS + g, g, f"kwok-{shape.name}-{n}", f"{job}-{n}",
                 STRAGGLER_SPEED if variant == "straggler" and n == SLOW_NODE else 1.0)
            for n in range(NODES) for g in range(GPUS)]


@contextmanager
def reporting_as(rank: Rank, shape: Shape, lines: list[str]) -> Iterator[Session]:
    """The rank's Session, with the reporter's output, node, pod and GPU queries redirected."""
    env = DistEnv("torchrun", rank.rank, rank.local_rank, NODES * GPUS, GPUS, GPUS, 0)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(metric_lines, "say", lines.append))
        stack.enter_context(mock.patch.object(metric_lines, "visible_gpus", lambda: GPUS))
        # Each GPU node is a host of its own (its own kernel), and the logs must not hold this machine's boot id.
        stack.enter_context(mock.patch.object(metric_lines, "host_boot_id", lambda: f"canned-{rank.node}"))
        stack.enter_context(mock.patch.object(torch.cuda, "get_device_name", lambda device=None: shape.gpu_name))
        stack.enter_context(mock.patch.dict(os.environ, {"NODE_NAME": rank.node, "POD_NAME": rank.pod}))
        yield Session(env, torch.device("cuda", rank.local_rank), "nccl", "cuda")


def jitter(rng: random.Random, value: float, spread: float = 0.01) -> float:
    return value * (1 + rng.uniform(-spread, spread))


def slices(rng: random.Random, key: str, value: float) -> dict[str, float | int]:
    """A figure as workloads/probe.py reports it: the median of PROBE_REPEATS slices, with their range."""
    return spread(key, [jitter(rng, value) for _ in range(PROBE_REPEATS)])


def probe(rng: random.Random, shape: Shape, speed: float) -> dict[str, object]:
    return {**slices(rng, "probe_matmul_tflops", shape.probe_tflops * speed), "probe_matmul_n": 8192,
            "probe_matmul_dtype": shape.probe_dtype, **slices(rng, "probe_h2d_gbps", shape.h2d_gbps),
            "probe_seconds": jitter(rng, 2.05)}


def compute_window(rng: random.Random, step_compute_ms: float) -> dict[str, object]:
    """What workloads/probe.py compute_window reports for a step of this compute time."""
    ms = jitter(rng, step_compute_ms)
    steps = max(3, math.ceil(COMPUTE_WINDOW_S * 1000 / ms))
    parts = [jitter(rng, ms) for _ in range(PROBE_REPEATS)]
    return {"compute_ms_per_step": ms, "compute_steps": steps, "compute_seconds": ms * steps / 1000,
            "compute_ms_per_step_min": min(parts), "compute_ms_per_step_max": max(parts),
            "compute_ms_per_step_repeats": PROBE_REPEATS}


def losses(first: float, last: float, steps: int, rng: random.Random) -> list[float]:
    """A falling loss curve (exponential approach from first towards last) with a little noise."""
    return [last + (first - last) * math.exp(-4 * s / max(1, steps - 1)) * (1 + rng.uniform(-0.01, 0.01))
            for s in range(steps)]


def checksum(workload: str) -> float:
    return {"bert": -1402.517731, "nanogpt": 2213.904417, "mnist": -37.812209}[workload]


def bert_log(shape: Shape, variant: str, rng: random.Random) -> dict[int, list[str]]:
    """Per pod index: the lines of its 8 ranks, in the order the workload prints them."""
    size = SIZES["bert"]
    spec = bert.SIZES[size]
    flops = next(r for r in table() if (r.workload, r.size) == ("bert", size)).flops_per_unit
    batch, untimed = 8, 1
    healthy = shape.peak * ANCHORS["bert", shape.precision] / flops  # samples/s per rank
    pace = healthy * min(r.speed for r in ranks("bert", shape, variant))  # synchronous: the slowest sets it
    out: dict[int, list[str]] = {}
    members = ranks("bert", shape, variant)
    throughputs = {r.rank: jitter(rng, pace, 0.002) for r in members}
    average = sum(throughputs.values()) / len(throughputs)
    first_loss = math.log(30522) + math.log(2)
    for r in members:
        lines = out.setdefault(r.rank // GPUS, [])
        with reporting_as(r, shape, lines) as session:
            reporter = metric_lines.Reporter("bert", session, probe(rng, shape, r.speed))
            reporter.steps_requested = spec.steps
            step_ms = batch / throughputs[r.rank] * 1000
            for step, loss in enumerate(losses(first_loss, first_loss - 1.2, spec.steps, rng)):
                reporter.step(step, loss, jitter(rng, step_ms * (3 if step == 0 else 1)))
            training_time = (spec.steps - untimed) * batch / throughputs[r.rank]
            lines.extend(bert.upstream_lines(r.rank, training_time, throughputs[r.rank]))
            if r.rank == 0:
                lines.append(bert.average_line(average))
            reporter.finish({
                "size": size, "precision": shape.precision, "batch_size": batch, "seq_len": spec.seq_len,
                "steps": spec.steps, "throughput": throughputs[r.rank], "throughput_avg": average,
                "training_time": training_time,
                **compute_window(rng, batch / healthy * 1000 * STEP_COMPUTE_SHARE / r.speed),
                "loss_expected_first": first_loss, "params_checksum": checksum("bert"),
            })
    return out


def nanogpt_log(shape: Shape, variant: str, rng: random.Random) -> dict[int, list[str]]:
    size = SIZES["nanogpt"]
    spec = nanogpt.SIZES[size]
    flops_per_token = next(r for r in table() if (r.workload, r.size) == ("nanogpt", size)).flops_per_unit
    tokens_per_iter = spec.batch_size * spec.grad_accum * spec.model.block_size
    healthy = shape.peak * ANCHORS["nanogpt", shape.precision] / flops_per_token  # tokens/s per rank
    members = ranks("nanogpt", shape, variant)
    pace = healthy * min(r.speed for r in members)
    peak = hardware.peak_bf16_flops(shape.gpu_name)  # what the workload looks up: None for a V100
    iter_ms = [jitter(rng, tokens_per_iter / pace * 1000 * (4 if i == 0 else 1), 0.005) for i in range(spec.max_iters)]
    first_loss = math.log(spec.model.vocab_size)
    curve = losses(first_loss, 2.6, spec.max_iters, rng)
    timed = iter_ms[nanogpt.MFU_WARMUP_ITERS:]
    sec_per_iter = sum(timed) / len(timed) / 1000
    flops_per_iter = flops_per_token * tokens_per_iter
    plan = sharding.plan_memory(sharding.meta_model(spec.model), spec.batch_size, NODES * GPUS, shape.precision,
                                shape.gpu_memory_bytes)
    out: dict[int, list[str]] = {}
    for r in members:
        lines = out.setdefault(r.rank // GPUS, [])
        with reporting_as(r, shape, lines) as session:
            reporter = metric_lines.Reporter("nanogpt", session, probe(rng, shape, r.speed))
            if r.rank == 0:
                lines.append(plan.line())
            reporter.steps_requested = spec.max_iters
            running: float | None = None
            for step in range(spec.max_iters):
                loss = curve[step] * (1 + rng.uniform(-0.005, 0.005))
                reporter.step(step, loss, iter_ms[step], lr=nanogpt.lr_at(step, argparse.Namespace(
                    lr=spec.lr, warmup_iters=spec.warmup_iters, max_iters=spec.max_iters)))
                if r.rank == 0:
                    mfu = flops_per_iter / (iter_ms[step] / 1000) / peak if peak else None
                    if mfu is not None and step + 1 > nanogpt.MFU_WARMUP_ITERS:
                        running = mfu if running is None else 0.9 * running + 0.1 * mfu
                    lines.append(nanogpt.iter_line(step, loss, iter_ms[step], running if running is not None else mfu))
            reporter.finish({
                "size": size, "sharding": plan.strategy, "memory_plan_bytes": plan.estimate_bytes,
                "precision": shape.precision, "compiled": True,
                "tokens_per_s": tokens_per_iter / sec_per_iter, "ms_per_iter": sec_per_iter * 1000,
                **compute_window(rng, tokens_per_iter / healthy * 1000 * STEP_COMPUTE_SHARE / r.speed),
                "mfu": flops_per_iter / sec_per_iter / peak if peak else None, "peak_flops": peak,
                "loss_expected_first": first_loss, "resumed_from_step": None, "iterations": spec.max_iters,
                "final_step": spec.max_iters, "params_checksum": checksum("nanogpt"),
            })
    return out


def mnist_log(shape: Shape, variant: str, rng: random.Random) -> dict[int, list[str]]:
    size = mnist.SIZES[SIZES["mnist"]]
    batch = 64
    members = ranks("mnist", shape, variant)
    per_rank = math.ceil(size.train_samples / len(members))  # DistributedSampler pads to equal shares
    batches = math.ceil(per_rank / batch)
    steps = batches * size.epochs
    step_ms = MNIST_STEP_MS[shape.name] / min(r.speed for r in members)
    curve = losses(math.log(mnist.NUM_CLASSES), 0.35, steps, rng)
    epoch_loss = [sum(curve[e * batches:(e + 1) * batches]) / batches for e in range(size.epochs)]
    accuracy = [min(0.99, 0.80 + 0.04 * e) for e in range(size.epochs)]
    out: dict[int, list[str]] = {}
    for r in members:
        lines = out.setdefault(r.rank // GPUS, [])
        with reporting_as(r, shape, lines) as session:
            reporter = metric_lines.Reporter("mnist", session, probe(rng, shape, r.speed))
            reporter.steps_requested = steps
            seconds = 0.0
            for step in range(steps):
                ms = jitter(rng, step_ms, 0.05)
                seconds += ms / 1000
                reporter.step(step, curve[step] * (1 + rng.uniform(-0.02, 0.02)), ms)
                if r.rank == 0 and (step + 1) % batches == 0:
                    epoch = step // batches
                    lines.append(mnist.epoch_line(epoch, epoch_loss[epoch], accuracy[epoch]))
            samples = min(per_rank, batches * batch) * size.epochs
            reporter.finish({
                "epochs": size.epochs, "loss_expected_first": math.log(mnist.NUM_CLASSES),
                "accuracy": accuracy[-1], "samples_per_s": samples / seconds,
                **compute_window(rng, MNIST_STEP_MS[shape.name] * 0.3 / r.speed),
                "params_checksum": checksum("mnist"),
            })
    return out


WRITERS = {"bert": bert_log, "nanogpt": nanogpt_log, "mnist": mnist_log}
VARIANTS = ("healthy", "straggler")


def header(workload: str, shape: Shape, variant: str, index: int) -> str:
    slow = f"; node kwok-{shape.name}-{SLOW_NODE} computes at {STRAGGLER_SPEED}x" if variant == "straggler" else ""
    return ("# CANNED OUTPUT for the local cluster (localcluster/emulation/canned_logs): synthetic, "
            f"not a measurement; pod {index} of {NODES} ({GPUS} ranks each) of python -m workloads.{workload} --size "
            f"{SIZES[workload]} on {shape.node_type} ({shape.gpu_name}){slow}; written by hack/canned_gpu_logs.py "
            f"(the workloads' own reporting code, numbers from the floors' anchors)")


def logs() -> dict[str, str]:
    """File name -> content of every canned GPU log."""
    files = {}
    for workload, write in WRITERS.items():
        for shape in SHAPES.values():
            for variant in VARIANTS:
                rng = random.Random(f"{workload}-{shape.name}-{variant}")
                for index, lines in write(shape, variant, rng).items():
                    name = f"{workload}-{shape.name}-{variant}-{index}.log"
                    files[name] = "\n".join([header(workload, shape, variant, index), *lines]) + "\n"
    return files


def main(argv: list[str] | None = None, out: Path | None = None) -> int:
    """Write (or `--check`) the logs in `--out`, whose default is `out`; one of them must be given."""
    parser = argparse.ArgumentParser(prog="hack/canned_gpu_logs.py", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    parser.add_argument("--out", type=Path, default=out, required=out is None,
                        help="the canned logs' folder (hack/canned_gpu_logs.py: localcluster/emulation/canned_logs)")
    args = parser.parse_args(argv)
    stale = []
    for name, content in logs().items():
        path = args.out / name
        if args.check:
            if not path.is_file() or path.read_text() != content:
                stale.append(name)
        else:
            path.write_text(content)
    if stale:
        print(f"hack/canned_gpu_logs.py: {len(stale)} canned logs differ from what the generator writes: "
              f"{', '.join(stale[:4])}{' ...' if len(stale) > 4 else ''} (rerun it)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
