"""CPU benchmark of the workloads at fixed configurations; prints `name: value unit` lines.

- BERT (bert-base shape, seq 128, batch 8, AdamW, fp32): the upstream aws-k8s-tester train.py loop
  reimplemented here (random init instead of the hub download, its dummy padded sentences, AdamW
  lr 1e-3, eager DDP) next to `python -m workloads.bert` at the same shape; then both in one
  process, a step of each in turn (the fairest comparison on a loaded machine); then ours with its
  defaults (bf16 autocast where the CPU has it) and with tcmalloc preloaded.
- GPT at nanoGPT's n_layer 4, n_head 4, n_embd 256, block 256, batch 8: tokens/s and ms/iter,
  fp32 (what nanoGPT's train.py runs on CPU: its autocast context is a no-op there) and bf16.
- all-reduce bus bandwidth over gloo between 2 processes.

Every measurement runs in a fresh process (clean allocator, same thread count) and leaves the first
step out of the timing. Usage: python bench/workloads.py [--steps N] [--repeats R] [--only bert,gpt,allreduce]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The in-process modes run as `python -m bench.workloads` from the repository root: run as a script,
# this file's own name would shadow the `workloads` package it imports.
TCMALLOC_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
)
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NUM_GPUS_PER_NODE")


def bench_env(preload: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("OMPI_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["NUM_GPUS_PER_NODE"] = "0"  # a CPU benchmark even where a GPU exists
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> list[dict]:
    """Run a command and return its KT2T_METRICS records (rank order)."""
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    records = [json.loads(ln.split(" ", 1)[1]) for ln in proc.stdout.splitlines() if ln.startswith("KT2T_METRICS ")]
    return sorted(records, key=lambda r: r.get("rank", 0))


def workload(name: str, *args: str, preload: str | None = None) -> dict:
    return run([sys.executable, "-m", f"workloads.{name}", *args], bench_env(preload))[0]


def report(name: str, value: float, unit: str) -> None:
    print(f"{name}: {value:.2f} {unit}", flush=True)


def upstream_recipe_steps() -> Iterator[None]:
    """The upstream train.py training loop, unchanged but for what needs the network or a GPU;
    yields after each optimizer step so the caller can time or interleave steps.

    Changes: the model is built from BertConfig() (bert-base-uncased's shape, random init) instead of
    from_pretrained; the dummy sentences are random ids laid out like its tokenizer output (CLS, 8
    tokens, SEP, padding to 128, labels = input ids); CPU instead of cuda:local_rank. Needs an
    initialised process group (world size 1), as its DDP does.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    num_samples, max_length = 100, 128
    input_ids = torch.zeros(num_samples, max_length, dtype=torch.long)
    input_ids[:, 0] = 101  # [CLS]
    input_ids[:, 1:9] = torch.randint(1000, 30522, (num_samples, 8))
    input_ids[:, 9] = 102  # [SEP]
    attention_mask = (input_ids != 0).long()
    labels = input_ids.detach().clone()
    next_sentence_labels = torch.randint(0, 2, (num_samples,))
    dataset = TensorDataset(input_ids, attention_mask, labels, next_sentence_labels)

    model = BertForPreTraining(BertConfig())
    ddp_model = DDP(model)
    train_dataloader = DataLoader(dataset, batch_size=8)
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=0.001)

    ddp_model.train()
    for batch in train_dataloader:
        optimizer.zero_grad()
        inputs, masks, labels_, nsp = batch
        outputs = ddp_model(input_ids=inputs, attention_mask=masks, labels=labels_, next_sentence_label=nsp)
        loss = outputs.loss
        loss.backward()
        optimizer.step()
        yield


def upstream_bert(steps: int) -> None:
    """Time the upstream loop alone (first step untimed); prints a KT2T_METRICS-style record."""
    from workloads.distributed import distributed_session

    with distributed_session("cpu"):
        loop = upstream_recipe_steps()
        next(loop)  # like ours: the first step (allocator, kernel selection) is not timed
        start = time.perf_counter()
        for _ in range(steps - 1):
            next(loop)
        training_time = time.perf_counter() - start
    throughput = (steps - 1) * 8 / training_time
    print("KT2T_METRICS " + json.dumps({"throughput": throughput, "training_time": training_time}), flush=True)


def interleaved_bert(steps: int) -> None:
    """Upstream loop and our BertTrainer (fp32) step by step in turn in one process, so background
    load on a shared machine hits both alike; samples/s from each one's median step time."""
    from workloads.bert import BertTrainer
    from workloads.distributed import distributed_session

    times: dict[str, list[float]] = {"upstream": [], "ours": []}
    with distributed_session("cpu") as session:
        loop = upstream_recipe_steps()
        ours = BertTrainer("base", session, "fp32", batch_size=8, seq_len=128, seed=1234)
        for step in range(steps):
            t0 = time.perf_counter()
            next(loop)
            t1 = time.perf_counter()
            ours.step(1e-4)
            t2 = time.perf_counter()
            if step:  # the first step of each is warm-up
                times["upstream"].append(t1 - t0)
                times["ours"].append(t2 - t1)
    record = {name: 8 / statistics.median(values) for name, values in times.items()}
    print("KT2T_METRICS " + json.dumps(record), flush=True)


@dataclass(frozen=True)
class Variant:
    """One configuration to measure; `measure` returns {metric name: (value, unit)}."""

    group: str
    measure: Callable[[], dict[str, tuple[float, str]]]


def bert_variants(steps: int, tcmalloc: str | None) -> list[Variant]:
    common = ("--size", "base", "--steps", str(steps), "--untimed-steps", "1")
    prefix = "bert_base_seq128_b8"

    def upstream() -> dict[str, tuple[float, str]]:
        m = run([sys.executable, "-m", "bench.workloads", "--upstream-bert", str(steps)], bench_env())[0]
        return {f"{prefix}_upstream_recipe_fp32": (m["throughput"], "samples/s")}

    def ours(precision: str, preload: str | None = None) -> Callable[[], dict[str, tuple[float, str]]]:
        def measure() -> dict[str, tuple[float, str]]:
            m = workload("bert", *common, "--precision", precision, preload=preload)
            suffix = "_tcmalloc" if preload else ""
            return {f"{prefix}_ours_{m['precision']}{suffix}": (m["throughput"], "samples/s")}

        return measure

    def interleaved() -> dict[str, tuple[float, str]]:
        m = run([sys.executable, "-m", "bench.workloads", "--interleaved-bert", str(max(steps, 4))], bench_env())[0]
        return {
            f"{prefix}_interleaved_upstream_recipe_fp32": (m["upstream"], "samples/s"),
            f"{prefix}_interleaved_ours_fp32": (m["ours"], "samples/s"),
        }

    variants = [
        Variant("bert", upstream),
        Variant("bert", ours("fp32")),
        Variant("bert", interleaved),
        Variant("bert", ours("auto")),
    ]
    if tcmalloc:
        variants.append(Variant("bert", ours("auto", tcmalloc)))
    return variants


def gpt_variants(iters: int, tcmalloc: str | None) -> list[Variant]:
    common = ("--size", "small", "--max-iters", str(iters), "--log-interval", "1000000")

    def gpt(precision: str, preload: str | None = None) -> Callable[[], dict[str, tuple[float, str]]]:
        def measure() -> dict[str, tuple[float, str]]:
            m = workload("nanogpt", *common, "--precision", precision, preload=preload)
            name = f"gpt_l4_h4_e256_b256_bs8_{m['precision']}" + ("_tcmalloc" if preload else "")
            return {
                f"{name}_tokens_per_s": (m["tokens_per_s"], "tokens/s"),
                f"{name}_ms_per_iter": (m["ms_per_iter"], "ms/iter"),
            }

        return measure

    variants = [Variant("gpt", gpt("fp32")), Variant("gpt", gpt("auto"))]
    if tcmalloc:
        variants.append(Variant("gpt", gpt("auto", tcmalloc)))
    return variants


def allreduce_variants(max_bytes: str) -> list[Variant]:
    def measure() -> dict[str, tuple[float, str]]:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "workloads.allreduce", "--max-bytes", max_bytes, "-n", "10", "-w", "3",
        ]  # fmt: skip
        m = run(cmd, bench_env())[0]
        name = f"allreduce_gloo_2proc_8B_{max_bytes}"
        return {f"{name}_busbw_avg": (m["busbw_avg"], "GB/s"), f"{name}_busbw_max": (m["busbw_max"], "GB/s")}

    return [Variant("allreduce", measure)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="BERT steps per measurement (first untimed)")
    parser.add_argument("--gpt-iters", type=int, default=30, help="GPT iterations (first 5 untimed)")
    parser.add_argument("--allreduce-max-bytes", default="64M")
    parser.add_argument("--only", default="bert,gpt,allreduce", help="comma-separated subset")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds over all variants, interleaved so background load hits each alike; medians printed",
    )
    parser.add_argument("--upstream-bert", type=int, metavar="STEPS", help=argparse.SUPPRESS)
    parser.add_argument("--interleaved-bert", type=int, metavar="STEPS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_bert:
        upstream_bert(args.upstream_bert)
        return 0
    if args.interleaved_bert:
        interleaved_bert(args.interleaved_bert)
        return 0
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first is not timed)")
    tcmalloc = next((p for p in TCMALLOC_CANDIDATES if Path(p).exists()), None)
    if tcmalloc is None:
        print("# tcmalloc not found (Debian: libtcmalloc-minimal4): skipping the preloaded variants")
    selected = set(args.only.split(","))
    variants = [
        *(bert_variants(args.steps, tcmalloc) if "bert" in selected else []),
        *(gpt_variants(args.gpt_iters, tcmalloc) if "gpt" in selected else []),
        *(allreduce_variants(args.allreduce_max_bytes) if "allreduce" in selected else []),
    ]
    samples: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for _ in range(args.repeats):
        for variant in variants:
            for name, (value, unit) in variant.measure().items():
                samples.setdefault(name, []).append(value)
                units[name] = unit
    for name, values in samples.items():
        report(name, statistics.median(values), units[name])
        if len(values) > 1:
            print(f"# {name}: min {min(values):.2f} max {max(values):.2f} over {len(values)} runs")
    upstream, ours = (
        samples.get("bert_base_seq128_b8_upstream_recipe_fp32"),
        samples.get("bert_base_seq128_b8_ours_fp32"),
    )
    if upstream and ours:
        report("bert_base_fp32_ours_vs_upstream", statistics.median(ours) / statistics.median(upstream), "x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
