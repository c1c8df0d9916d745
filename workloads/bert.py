"""BERT pre-training (MLM + NSP) with DDP on synthetic batches; prints the upstream test's lines.

Every rank also prints the KT2T_STEP and KT2T_METRICS lines of workloads/metric_lines.py.

Run: torchrun --nproc_per_node=N -m workloads.bert --size base
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import BertConfig, BertForPreTraining

from workloads import hardware
from workloads.distributed import Session, data_parallel, mean_over_ranks
from workloads.metric_lines import Reporter, params_checksum, say
from workloads.probe import compute_window, synchronize
from workloads.program import new_parser, run_main, workload_main

# Special ids at the bottom of every vocabulary; real tokens are PAD_ID+FIRST_TOKEN.. vocab_size-1.
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3
FIRST_TOKEN = 4
IGNORE = -100  # the label value transformers' cross-entropy skips


@dataclass(frozen=True)
class BertSize:
    config: dict[str, int]
    seq_len: int
    steps: int
    lr: float


SIZES: dict[str, BertSize] = {
    # transformers' own test config (BertModelTester): no download, trains in seconds on a CPU.
    "tiny": BertSize(
        dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
        seq_len=32,
        steps=200,
        lr=5e-3,  # a 30k-parameter model tolerates (and needs, to learn in seconds) a large lr
    ),
    # bert-base-uncased's shape and the upstream test's seq 128 / batch 8.
    "base": BertSize({}, seq_len=128, steps=13, lr=1e-4),
    "large": BertSize(
        dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
        seq_len=128,
        steps=13,
        lr=1e-4,
    ),
}


def build_model(size: str, device: torch.device) -> BertForPreTraining:
    # SDPA attention: flash/memory-efficient kernels on GPU, fused on CPU.
    config = BertConfig(**SIZES[size].config, attn_implementation="sdpa")
    return BertForPreTraining(config).to(device)


class PretrainingLoss(nn.Module):
    """BertForPreTraining's MLM + NSP loss, with the vocabulary projection run on masked tokens only.

    The same parameters and the same loss value as `BertForPreTraining(...).loss`, but the
    30k-wide decoder (about a fifth of bert-base's FLOPs at seq 128) runs on the 15% of positions
    that carry a label, as NVIDIA's BERT pre-training does. A module of its own so DDP wraps it:
    calling submodules around DDP would skip its gradient hooks.
    """

    def __init__(self, model: BertForPreTraining) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
        next_sentence_label: torch.Tensor,
    ) -> torch.Tensor:
        out = self.model.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        masked = labels != IGNORE
        mlm_scores = self.model.cls.predictions(out.last_hidden_state[masked])
        nsp_scores = self.model.cls.seq_relationship(out.pooler_output)
        # fp32 losses under bf16 autocast (cross_entropy is on autocast's fp32 list anyway).
        return F.cross_entropy(mlm_scores.float(), labels[masked]) + F.cross_entropy(
            nsp_scores.float(), next_sentence_label
        )


def synthetic_batch(
    vocab_size: int, batch_size: int, seq_len: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """A learnable MLM + NSP batch made on the fly, so nothing is downloaded.

    Each sentence counts upwards from a start token drawn from a skewed distribution: masked tokens
    are predictable from their neighbours and common tokens are common, so the MLM loss falls from
    ln(V); sentence B continues sentence A (NSP label 0) or starts elsewhere (label 1), so the NSP
    loss falls from ln(2). At random init both heads are near uniform: first loss ~ ln(V) + ln(2).
    """
    span = vocab_size - FIRST_TOKEN
    half = (seq_len - 3) // 2  # [CLS] A [SEP] B [SEP]
    # Squaring a uniform draw skews starts towards small ids (a cheap Zipf-like unigram).
    start = (torch.rand(batch_size, generator=generator) ** 2 * span).long()
    is_random_next = torch.randint(0, 2, (batch_size,), generator=generator)
    random_start = torch.randint(0, span, (batch_size,), generator=generator)
    steps = torch.arange(half)
    sent_a = (start[:, None] + steps) % span + FIRST_TOKEN
    b_start = torch.where(is_random_next.bool(), random_start, start + half)
    sent_b = (b_start[:, None] + steps) % span + FIRST_TOKEN

    cls = torch.full((batch_size, 1), CLS_ID)
    sep = torch.full((batch_size, 1), SEP_ID)
    tokens = torch.cat([cls, sent_a, sep, sent_b, sep], dim=1)
    pad = seq_len - tokens.shape[1]
    token_type = torch.cat(
        [
            torch.zeros(batch_size, half + 2, dtype=torch.long),
            torch.ones(batch_size, half + 1, dtype=torch.long),
        ],
        dim=1,
    )
    attention = torch.ones_like(tokens)
    if pad:
        tokens = torch.cat([tokens, torch.full((batch_size, pad), PAD_ID)], dim=1)
        token_type = torch.cat([token_type, torch.zeros(batch_size, pad, dtype=torch.long)], dim=1)
        attention = torch.cat([attention, torch.zeros(batch_size, pad, dtype=torch.long)], dim=1)

    # BERT's masking recipe: 15% of real tokens; of those 80% [MASK], 10% random, 10% kept.
    maskable = tokens >= FIRST_TOKEN
    chosen = (torch.rand(tokens.shape, generator=generator) < 0.15) & maskable
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    roll = torch.rand(tokens.shape, generator=generator)
    inputs = tokens.clone()
    inputs[chosen & (roll < 0.8)] = MASK_ID
    randomise = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[randomise] = torch.randint(FIRST_TOKEN, vocab_size, tokens.shape, generator=generator)[randomise]
    return {
        "input_ids": inputs,
        "token_type_ids": token_type,
        "attention_mask": attention,
        "labels": labels,
        "next_sentence_label": is_random_next,
    }


def lr_at(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up then linear decay: lr 1e-3 with no warm-up (upstream) makes the loss rise."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total - step) / max(1, total - warmup))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = new_parser("workloads.bert", __doc__, precision=True)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--batch-size", type=int, default=8, help="per rank (upstream: 8)")
    parser.add_argument("--seq-len", type=int, help="default: 32 for tiny, 128 otherwise")
    parser.add_argument("--steps", type=int, help="optimizer steps per rank (default: per size)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default: per size)")
    parser.add_argument("--warmup-steps", type=int, help="default: 10%% of the steps, at least 1")
    parser.add_argument(
        "--untimed-steps",
        type=int,
        default=1,
        help="first steps left out of the timing (allocator and kernel warm-up)",
    )
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    args.seq_len = args.seq_len or size.seq_len
    args.steps = args.steps or size.steps
    args.lr = args.lr or size.lr
    args.warmup_steps = args.warmup_steps if args.warmup_steps is not None else max(1, args.steps // 10)
    if args.untimed_steps >= args.steps:
        parser.error("--untimed-steps must be smaller than --steps")
    return args


class BertTrainer:
    """One rank's DDP model, fused AdamW and synthetic data stream; step() is one optimizer step.

    A class of its own so bench/workloads.py can drive the very same step next to the upstream loop.
    """

    def __init__(self, size: str, session: Session, precision: str, batch_size: int, seq_len: int, seed: int) -> None:
        self.device = session.device
        self.precision = hardware.resolve_precision(precision, self.device)
        self.batch_size, self.seq_len = batch_size, seq_len
        # Same seed on every rank (DDP broadcasts rank 0's weights anyway); data differs per rank.
        torch.manual_seed(seed)
        self.model = build_model(size, self.device)
        self.ddp = data_parallel(PretrainingLoss(self.model), session)
        self.optimizer = hardware.adamw(self.ddp.parameters(), self.device, lr=0.0, weight_decay=0.01)
        self.generator = torch.Generator().manual_seed(seed * 1000 + session.env.rank)

    def batch(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        batch = synthetic_batch(self.model.config.vocab_size, self.batch_size, self.seq_len, generator)
        return {key: value.to(self.device, non_blocking=True) for key, value in batch.items()}

    def forward_backward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with hardware.autocast(self.device, self.precision):
            loss = self.ddp(**batch)
        loss.backward()
        return loss

    def step(self, lr: float) -> float:
        """One optimizer step at learning rate lr; returns the loss (.item() waits for the GPU)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = self.batch(self.generator)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.forward_backward(batch)
        self.optimizer.step()
        return loss.item()

    def compute_window(self) -> dict[str, float | int]:
        """Forward+backward without the all-reduce, on a batch of its own (training data untouched)."""
        batch = self.batch(torch.Generator().manual_seed(-1))
        return compute_window(self.ddp, lambda: self.forward_backward(batch), self.device)


def upstream_lines(rank: int, training_time: float, throughput: float) -> list[str]:
    """The upstream test's per-rank lines (its parser reads them; canned_gpu_logs.py prints them too)."""
    return [
        f"Process {rank} - Training time: {training_time:.2f} seconds",
        f"Process {rank} - Throughput: {throughput:.2f} samples/second",
    ]


def average_line(average: float) -> str:
    """Rank 0's line: the mean over ranks (upstream printed rank 0's own value under this label)."""
    return f"Average Throughput: {average:.2f} samples/second"


def train(args: argparse.Namespace, session: Session, reporter: Reporter) -> None:
    device, rank = session.device, session.env.rank
    trainer = BertTrainer(args.size, session, args.precision, args.batch_size, args.seq_len, args.seed)
    compute = trainer.compute_window()
    reporter.steps_requested = args.steps
    start = time.perf_counter()
    for step in range(args.steps):
        if step == args.untimed_steps:
            synchronize(device)
            start = time.perf_counter()
        step_start = time.perf_counter()
        loss = trainer.step(lr_at(step, args.lr, args.warmup_steps, args.steps))
        reporter.step(step, loss, (time.perf_counter() - step_start) * 1000)
    synchronize(device)
    training_time = time.perf_counter() - start
    throughput = (args.steps - args.untimed_steps) * args.batch_size / training_time

    for line in upstream_lines(rank, training_time, throughput):
        say(line)
    average = mean_over_ranks(throughput, session)
    if session.is_main:
        say(average_line(average))
    reporter.finish(
        {
            "size": args.size,
            "precision": trainer.precision,
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "steps": args.steps,
            "throughput": throughput,
            "throughput_avg": average,
            "training_time": training_time,
            **compute,
            "loss_expected_first": math.log(trainer.model.config.vocab_size) + math.log(2),
            "params_checksum": params_checksum(trainer.model.parameters()),
        }
    )


main = workload_main("bert", parse_args, train)

if __name__ == "__main__":
    run_main("workloads.bert", main)
