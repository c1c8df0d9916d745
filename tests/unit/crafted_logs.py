"""Crafted workload logs for the verdict tests: this project's KT2T lines (workloads/metric_lines.py's
contract) and nccl-tests tables shaped on published figures. Crafted, not captured: each helper
says what it stands for."""

from __future__ import annotations

import json
from typing import Any

GIB = 1 << 30


def metrics_record(rank: int, world_size: int, workload: str = "bert", gpus_per_node: int = 8,
                   **overrides: Any) -> dict[str, Any]:
    """One rank's healthy KT2T_METRICS record: ranks fill nodes in order, `gpus_per_node` a node."""
    node = rank // gpus_per_node
    throughput_key = {"bert": "throughput", "nanogpt": "tokens_per_s", "mnist": "samples_per_s",
                      "allreduce": "busbw_avg"}[workload]
    record: dict[str, Any] = {
        "workload": workload, "rank": rank, "world_size": world_size, "local_rank": rank % gpus_per_node,
        "node": f"node-{node}", "pod": f"{workload}-worker-{node}", "restart_count": 0,
        "steps_requested": 20, "steps_completed": 20, "loss_first": 5.3, "loss_last": 3.1,
        throughput_key: 120.0 + (rank % 3) * 0.5, "probe_matmul_tflops": 250.0 + rank % 4,
        "probe_matmul_n": 8192, "probe_matmul_dtype": "bfloat16", "probe_seconds": 0.26,
        "probe_h2d_gbps": 50.0, "compute_ms_per_step": 140.0 + rank % 2, "params_checksum": -1234.5678,
        "nonfinite": [],
    }
    if workload == "allreduce":
        for key in ("loss_first", "loss_last", "params_checksum", "compute_ms_per_step"):
            record.pop(key)
    record.update(overrides)
    return record


def metrics_line(record: dict[str, Any]) -> str:
    return "KT2T_METRICS " + json.dumps(record, separators=(",", ":"))


def step_lines(rank: int, steps: int = 20, first: float = 5.3, last: float = 3.1) -> list[str]:
    """A falling loss, one KT2T_STEP line per step."""
    losses = [round(first + (last - first) * s / (steps - 1), 4) for s in range(steps)]
    return ["KT2T_STEP " + json.dumps({"rank": rank, "step": s, "loss": loss, "ms": 50.0}, separators=(",", ":"))
            for s, loss in enumerate(losses)]


def training_log(world_size: int, workload: str = "bert", gpus_per_node: int = 8,
                 overrides: dict[int, dict[str, Any]] | None = None) -> str:
    """Every rank's steps and record in one log (as mpirun's launcher log, or a shared pipe, holds them)."""
    lines: list[str] = []
    for rank in range(world_size):
        if workload != "allreduce":
            lines += step_lines(rank)
        lines.append(metrics_line(metrics_record(rank, world_size, workload, gpus_per_node,
                                                 **(overrides or {}).get(rank, {}))))
    return "\n".join(lines) + "\n"


NCCL_HEADER = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes {max_bytes} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def nccl_table(peak_busbw: float, ranks: int, max_bytes: int = 16 * GIB, wrong: int = 0,
               average: float | None = None, tag: bool = False) -> str:
    """An all_reduce_perf sweep from 8 B to max_bytes whose bus bandwidth climbs to `peak_busbw` at
    the largest size (the curve's shape follows real sweeps: latency-bound, then saturating)."""
    factor = 2 * (ranks - 1) / ranks
    rows, size = [], 8
    while size <= max_bytes:
        busbw = peak_busbw * size / (size + 64 * 2**20)  # half the peak at 64 MiB
        algbw = busbw / factor
        time_us = size / (algbw * 1e3) if algbw else 40.0
        half = f"{time_us:9.2f} {algbw:7.2f} {busbw:7.2f} {wrong:6d}"
        rows.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {half} {half}")
        size *= 2
    body = NCCL_HEADER.format(max_bytes=max_bytes) + "\n".join(rows) + "\n"
    avg = average if average is not None else sum(float(r.split()[7]) for r in rows) / len(rows)
    body += f"# Out of bounds values : {1 if wrong else 0} {'FAILED' if wrong else 'OK'}\n"
    body += f"# Avg bus bandwidth    : {avg:.4f}\n#\n"
    if tag:
        body = "".join(f"[1,0]<stdout>:{line}\n" for line in body.splitlines())
    return body
