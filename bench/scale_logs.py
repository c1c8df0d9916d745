"""Generated training logs for the scale bench: every rank's own lines, in the workloads' contract.

Each rank prints `KT2T_STEP {json}` per step and one `KT2T_METRICS {json}` at the end
(workloads/metric_lines.py's contract; the verdicts branch documents it in workloads/README.md), plus
BERT's `Process N - ...` lines, with values that differ by rank (throughput, step times, loss
noise) but describe a healthy run: every loss falls, the replicas' checksums agree, no rank is a
straggler. A torchrun pod's log holds its node's ranks, interleaved by step as they share the
pod's stdout; an MPIJob launcher's log holds every rank, each line tagged `[1,<rank>]<stdout>:`
by `mpirun --tag-output`. A pod (a node) in NOISY_EVERY is padded with NCCL_DEBUG=INFO-style lines
to NOISY_POD_BYTES: real jobs have a few verbose ranks.

The records carry no `node` and a null `pod`: the scheduler decides where pod i lands, so the
harness places each rank from the pods it saw (its rank_locations).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

# Steps per rank: 8 ranks x 130 steps of ~60-byte KT2T_STEP lines make a pod's log about 64 KiB.
STEPS = 130
NOISY_EVERY = 50  # every 50th pod (node) is a noisy one
NOISY_POD_BYTES = 1024 * 1024
LOSS_FIRST = 10.42  # ln(30522) + ln(2): BERT's MLM + NSP loss of a uniform guess
LOSS_LAST = 7.1
PARAMS_CHECKSUM = -1234.567891


def _jitter(rank: int, salt: int) -> float:
    """A deterministic value in [0, 1) per rank: runs differ by rank, not from run to run."""
    return ((rank * 2654435761 + salt * 40503) % 1000003) / 1000003


def step_line(rank: int, step: int) -> str:
    loss = LOSS_FIRST + (LOSS_LAST - LOSS_FIRST) * step / (STEPS - 1) + 0.05 * math.sin(rank + step)
    record = {"rank": rank, "step": step, "loss": round(loss, 4), "ms": round(42.0 + 4 * _jitter(rank, step), 2)}
    return "KT2T_STEP " + json.dumps(record, separators=(",", ":"))


def final_lines(rank: int, world_size: int, gpus_per_node: int, launcher: str) -> list[str]:
    """BERT's closing lines and the rank's KT2T_METRICS record."""
    throughput = round(190.0 + 10 * _jitter(rank, 1), 2)
    seconds = round(STEPS * 8 / throughput, 2)
    record = {
        "workload": "bert", "rank": rank, "world_size": world_size, "local_rank": rank % gpus_per_node,
        "pod": None, "device": f"cuda:{rank % gpus_per_node}", "backend": "nccl", "launcher": launcher,
        "restart_count": 0, "size": "base", "precision": "bf16", "batch_size": 8, "seq_len": 128,
        "steps": STEPS, "steps_requested": STEPS, "steps_completed": STEPS,
        "throughput": throughput, "throughput_avg": 195.0, "training_time": seconds,
        "loss_first": round(LOSS_FIRST + 0.05 * math.sin(rank), 4),
        "loss_last": round(LOSS_LAST + 0.05 * math.sin(rank + STEPS - 1), 4),
        "loss_expected_first": LOSS_FIRST, "params_checksum": PARAMS_CHECKSUM,
        "probe_matmul_tflops": round(250.0 + 5 * _jitter(rank, 2), 1), "probe_matmul_n": 8192,
        "probe_matmul_dtype": "bfloat16", "probe_seconds": 0.26, "probe_h2d_gbps": 24.5,
        "compute_ms_per_step": round(38.0 + 2 * _jitter(rank, 3), 2), "nonfinite": [],
    }
    return [f"Process {rank} - Training time: {seconds:.2f} seconds",
            f"Process {rank} - Throughput: {throughput:.2f} samples/second",
            "KT2T_METRICS " + json.dumps(record, separators=(",", ":"))]


def node_lines(node: int, world_size: int, gpus_per_node: int, launcher: str) -> Iterator[tuple[int, str]]:
    """(rank, line) for every line the ranks of node `node` print, in the order they print them."""
    ranks = range(node * gpus_per_node, (node + 1) * gpus_per_node)
    for step in range(STEPS):
        for rank in ranks:
            yield rank, step_line(rank, step)
    if node % NOISY_EVERY == 0:
        yield from _noise(node, ranks)
    for rank in ranks:
        for line in final_lines(rank, world_size, gpus_per_node, launcher):
            yield rank, line


def _noise(node: int, ranks: range) -> Iterator[tuple[int, str]]:
    """NCCL_DEBUG=INFO lines until the node's output reaches about NOISY_POD_BYTES."""
    written, i = 0, 0
    while written < NOISY_POD_BYTES:
        rank = ranks[i % len(ranks)]
        line = (f"kwok-gpu-{node}:{4000 + rank % 8}:{4100 + i % 97} [{rank % 8}] NCCL INFO Channel "
                f"{i % 32:02d}/0 : {rank}[{rank % 8}] -> {(rank + 8) % 65536}[{rank % 8}] [send] via "
                f"NET/Libfabric/{i % 4}/GDRDMA")
        written += len(line) + 1
        i += 1
        yield rank, line


def write_pod_logs(folder: Path, prefix: str, nodes: int, gpus_per_node: int) -> int:
    """torchrun: `<prefix>-<i>.log` for pod i (node i's ranks); returns the bytes written."""
    total = 0
    for node in range(nodes):
        lines = node_lines(node, nodes * gpus_per_node, gpus_per_node, "torchrun")
        text = "\n".join(line for _, line in lines) + "\n"
        (folder / f"{prefix}-{node}.log").write_text(text)
        total += len(text)
    return total


def write_launcher_log(path: Path, nodes: int, gpus_per_node: int) -> int:
    """mpi: every rank's lines tagged as `mpirun --tag-output` does; returns the bytes written."""
    total = 0
    with path.open("w") as out:
        for node in range(nodes):
            text = "".join(f"[1,{rank}]<stdout>:{line}\n"
                           for rank, line in node_lines(node, nodes * gpus_per_node, gpus_per_node, "mpi"))
            out.write(text)
            total += len(text)
    return total


# What an MPIJob worker's sshd says (its ranks' output goes to the launcher through ssh).
WORKER_LOG = "Server listening on 0.0.0.0 port 22.\nServer listening on :: port 22.\n" \
             "Accepted publickey for root from 127.0.0.1 port 40022 ssh2: ECDSA SHA256:kt2t-bench\n"
