"""torch.distributed all-reduce bandwidth sweep that prints an nccl-tests-style table.

Like `all_reduce_perf -b 8 -e <max> -f 2`: float32 sum, sizes doubling from --min-bytes, bus
bandwidth = algbw * 2(n-1)/n, and `# Avg bus bandwidth` over all sizes. With NCCL_TESTS_MIN_BW set
(GB/s), exits 1 when that average is below 0.9 x the value, as nccl-tests does. Every rank prints a
KT2T_STEP line per message size and its KT2T_METRICS line (workloads/metric_lines.py).
Run: torchrun --nproc_per_node=N -m workloads.allreduce --max-bytes 1G
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from workloads.distributed import EnvError, Session
from workloads.metric_lines import Reporter, say
from workloads.program import new_parser, run_main, workload_main

_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ELEMENT_BYTES = 4  # float32, nccl-tests' default type
MIN_BW_FRACTION = 0.9  # nccl-tests fails below 90% of NCCL_TESTS_MIN_BW

HEADER = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
)

SIZE_DEFAULTS = {"tiny": (1 << 20, 5, 2), "default": (128 << 20, 20, 5)}  # max bytes, iters, warmup


def parse_bytes(text: str) -> int:
    """nccl-tests' size syntax: 8, 64K, 128M, 2G."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 8, 64K, 128M or 2G")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    time_us: float
    algbw: float
    busbw: float
    wrong: int
    iters: int = 0  # how many were timed (more than -n with --seconds)

    def format(self) -> str:
        return (
            f"{self.size:12d}  {self.count:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}  "
            f"{self.time_us:7.2f}  {self.algbw:6.2f}  {self.busbw:6.2f}  {self.wrong:5d}"
        )


def bus_factor(world_size: int) -> float:
    """All-reduce moves 2(n-1)/n of the buffer per rank; 0 for one rank (nothing crosses a link)."""
    return 2 * (world_size - 1) / world_size


def timed(buf: torch.Tensor, iters: int, device: torch.device) -> float:
    """Seconds for `iters` all-reduces back to back."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def iterations_for(seconds: float, buf: torch.Tensor, iters: int, device: torch.device) -> int:
    """How many iterations fill `seconds`: timed runs of doubling length until one takes a quarter
    of it (the first iterations after the warm-up are slower). Every rank takes the slowest rank's
    time at each round, so all run the same number of collectives."""
    count = iters
    while True:
        took = torch.tensor([timed(buf, count, device)], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        if float(took.item()) >= seconds / 4:
            return max(iters, math.ceil(seconds / float(took.item()) * count))
        count *= 2


def measure(size: int, iters: int, warmup: int, session: Session, seconds: float = 0.0) -> Row:
    """One row: the mean time of `iters` all-reduces of `size` bytes, or of as many as fill
    `seconds` (--seconds: a window much longer than a throttled or duty-cycled CPU's period, which
    a few iterations of a millisecond would fall between)."""
    device, world = session.device, session.env.world_size
    count = max(1, size // ELEMENT_BYTES)
    buf = torch.ones(count, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    if seconds > 0:
        iters = iterations_for(seconds, buf, iters, device)
    dist.barrier()
    elapsed = timed(buf, iters, device) / iters
    # nccl-tests reports the mean over ranks; every rank then prints the same row.
    mean = torch.tensor([elapsed], dtype=torch.float64, device=device)
    dist.all_reduce(mean)
    seconds = float(mean.item()) / world

    # Check on a fresh buffer (the timed one grew by x world each call): rank r adds r+1.
    buf.fill_(session.env.rank + 1)
    dist.all_reduce(buf)
    expected = world * (world + 1) / 2
    wrong = int((buf != expected).sum().item())
    algbw = count * ELEMENT_BYTES / seconds / 1e9
    return Row(count * ELEMENT_BYTES, count, seconds * 1e6, algbw, algbw * bus_factor(world), wrong, iters)


def min_bw_from_env() -> float | None:
    raw = os.environ.get("NCCL_TESTS_MIN_BW")
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise EnvError(f"NCCL_TESTS_MIN_BW={raw!r} is not a number (GB/s)") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = new_parser("workloads.allreduce", __doc__, precision=False)
    parser.add_argument("--size", choices=sorted(SIZE_DEFAULTS), default="default")
    parser.add_argument("-b", "--min-bytes", type=parse_bytes, default=8)
    parser.add_argument("-e", "--max-bytes", type=parse_bytes, help="default: 1M for tiny, 128M otherwise")
    parser.add_argument("-f", "--step-factor", type=int, default=2)
    parser.add_argument("-n", "--iters", type=int, help="timed iterations per size")
    parser.add_argument("-w", "--warmup-iters", type=int, help="untimed iterations per size")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="time each size for at least this long (more iterations than -n when they are short)")
    args = parser.parse_args(argv)
    max_bytes, iters, warmup = SIZE_DEFAULTS[args.size]
    args.max_bytes = args.max_bytes or max_bytes
    args.iters = args.iters or iters
    args.warmup_iters = args.warmup_iters if args.warmup_iters is not None else warmup
    if args.step_factor < 2:
        parser.error("--step-factor must be at least 2")
    if args.min_bytes > args.max_bytes:
        parser.error("--min-bytes must not exceed --max-bytes")
    if not args.seconds >= 0:
        parser.error(f"--seconds must be 0 or more, got {args.seconds}")
    args.min_bw = min_bw_from_env()  # before any collective: a typo fails fast, on every rank alike
    return args


def sweep_sizes(args: argparse.Namespace) -> list[int]:
    """--min-bytes, x --step-factor, up to --max-bytes."""
    sizes = [args.min_bytes]
    while sizes[-1] * args.step_factor <= args.max_bytes:
        sizes.append(sizes[-1] * args.step_factor)
    return sizes


def verdict(wrong: int, busbw_avg: float, min_bw: float | None) -> int:
    """nccl-tests' exit status: 1 for wrong values or an average below 0.9 x NCCL_TESTS_MIN_BW."""
    if wrong:
        print(f"workloads.allreduce: {wrong} wrong values in the results", file=sys.stderr)
        return 1
    if min_bw is not None and busbw_avg < MIN_BW_FRACTION * min_bw:
        print(
            f"workloads.allreduce: average bus bandwidth {busbw_avg:g} GB/s is below "
            f"{MIN_BW_FRACTION} x NCCL_TESTS_MIN_BW={min_bw:g} GB/s",
            file=sys.stderr,
        )
        return 1
    return 0


def sweep(args: argparse.Namespace, session: Session, reporter: Reporter) -> int:
    sizes = sweep_sizes(args)
    reporter.steps_requested = len(sizes)
    if session.is_main:
        say(f"# all-reduce sweep: {session.env.world_size} ranks, backend {session.backend}")
        say(HEADER)
    rows: list[Row] = []
    for index, size in enumerate(sizes):
        row = measure(size, args.iters, args.warmup_iters, session, args.seconds)
        rows.append(row)
        reporter.step(index, ms=row.time_us / 1000, bytes=row.size, algbw=row.algbw, busbw=row.busbw, wrong=row.wrong,
                      iters=row.iters)
        if session.is_main:
            say(row.format())
    wrong = sum(row.wrong for row in rows)
    busbw_avg = sum(row.busbw for row in rows) / len(rows)
    if session.is_main:
        say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        say(f"# Avg bus bandwidth    : {busbw_avg:g}")
        say("#")
    reporter.finish(
        {
            "busbw_avg": busbw_avg,
            "busbw_max": max(row.busbw for row in rows),
            "algbw_max": max(row.algbw for row in rows),
            "max_bytes": rows[-1].size,
            "wrong": wrong,
            "min_bw": args.min_bw,
        }
    )
    return verdict(wrong, busbw_avg, args.min_bw)


main = workload_main("allreduce", parse_args, sweep)

if __name__ == "__main__":
    run_main("workloads.allreduce", main)
