"""Per-rank compute probes that no collective can slow down: a matmul's TFLOPS, host-to-device GB/s.

In synchronous data-parallel training every rank waits for the slowest at each all-reduce, so a
slow GPU or node makes every rank's throughput equally slow. These figures are measured on the
rank's own device with no communication in the timed region, so the harness can compare ranks on
them and name the slow one.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping

import torch
from torch.nn.parallel import DistributedDataParallel

from workloads import hardware
from workloads.distributed import EnvError

# Square matmul sizes: large enough to be compute-bound, small enough that the probe stays short.
# CPU fp32 at 512: ~7 ms per product on one core (torchrun gives each rank one thread).
# GPU bf16 at 8192: ~1.1 TFLOP per product, ~2 ms on an H100.
MATMUL_N = {"cpu": 512, "cuda": 8192}
# Time spent in timed products (the probe's cost, plus warm-up), unless KT2T_PROBE_SECONDS says
# otherwise. Two ranks probing at once on a shared, busy 2-core machine measured ratios down to 0.51
# at 0.25 s, 0.63 at 1 s and 0.89 at 2 s between healthy ranks, against a straggler threshold of
# 0.7 (STRAGGLER_FRACTION): a short probe would name healthy ranks. The local cluster's slow node
# stops processes in 100 ms windows, which a probe must span many of.
MATMUL_SECONDS = 2.0
PROBE_SECONDS_VARIABLE = "KT2T_PROBE_SECONDS"
MATMUL_WARMUP = 2
H2D_BYTES = 64 << 20  # one pinned copy: ~1.3 ms on PCIe 5 x16; pinned blocks stay cached, so keep it small
H2D_COPIES = 20
# Slices each probe is timed in, apart: enough for its own spread (min, median, max) at a cost of none,
# since the slices share the probe's budget. 5 slices of a 2 s budget still span 4 of the slow node's
# 100 ms windows each.
PROBE_REPEATS = 5


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on a GPU (kernels run asynchronously); nothing to wait for on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_tflops(device: torch.device, seconds: float = MATMUL_SECONDS,
                  repeats: int = PROBE_REPEATS) -> dict[str, float | int | str]:
    """TFLOPS of repeated n x n products on device: bf16 on GPU (tensor cores; fp16 on a GPU without
    native bf16, a V100, whose tensor cores take fp16 only), fp32 on CPU.

    Time-boxed rather than a fixed count, so the probe costs the same on a slow CPU and a fast GPU;
    the budget is cut into `repeats` slices timed apart, so the record carries the probe's own spread
    (`probe_matmul_tflops_min`/`_max` beside the median `probe_matmul_tflops`): the harness names a
    rank only when even its best slice is slow (harness/verdict/stragglers.py).
    """
    n = MATMUL_N["cuda" if device.type == "cuda" else "cpu"]
    dtype = torch.float32
    if device.type == "cuda":
        dtype = torch.bfloat16 if hardware.bf16_supported(device) else torch.float16
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=generator)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(MATMUL_WARMUP):
        torch.mm(a, b)
    synchronize(device)
    per_product = (time.perf_counter() - start) / MATMUL_WARMUP
    slice_s = seconds / repeats
    # Batches of about a tenth of a slice between synchronisations: few syncs, little overshoot.
    batch = max(1, int(slice_s / 10 / max(per_product, 1e-9)))
    rates = []
    for _ in range(repeats):
        products, elapsed = 0, 0.0
        start = time.perf_counter()
        while elapsed < slice_s:
            for _ in range(batch):
                torch.mm(a, b)
            synchronize(device)  # a GPU queues products asynchronously: time what really ran
            products += batch
            elapsed = time.perf_counter() - start
        rates.append(2 * n**3 * products / elapsed / 1e12)
    return {**spread("probe_matmul_tflops", rates), "probe_matmul_n": n,
            "probe_matmul_dtype": str(dtype).removeprefix("torch.")}


def spread(key: str, samples: list[float]) -> dict[str, float | int]:
    """`key` the median of the samples, `key_min`/`key_max` their range, `key_repeats` their count:
    the harness's straggler verdict reads a figure's spread from these (harness/verdict/stragglers.py)."""
    return {key: statistics.median(samples), f"{key}_min": min(samples), f"{key}_max": max(samples),
            f"{key}_repeats": len(samples)}


def h2d_gbps(device: torch.device, repeats: int = PROBE_REPEATS) -> dict[str, float | int]:
    """Host-to-device copy bandwidth from pinned memory, in GB/s (1e9 bytes): the PCIe link's health;
    the copies timed in `repeats` groups, so the record carries the figure's spread."""
    host = torch.empty(H2D_BYTES, dtype=torch.uint8, pin_memory=True)
    target = torch.empty(H2D_BYTES, dtype=torch.uint8, device=device)
    target.copy_(host, non_blocking=True)  # warm-up: maps the pinned pages
    synchronize(device)
    copies = max(1, H2D_COPIES // repeats)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(copies):
            target.copy_(host, non_blocking=True)
        synchronize(device)
        rates.append(H2D_BYTES * copies / (time.perf_counter() - start) / 1e9)
    return spread("probe_h2d_gbps", rates)


def probe_seconds(env: Mapping[str, str] | None = None) -> float:
    """KT2T_PROBE_SECONDS (a number > 0), else MATMUL_SECONDS."""
    raw = (os.environ if env is None else env).get(PROBE_SECONDS_VARIABLE, "")
    if raw == "":
        return MATMUL_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise EnvError(f"{PROBE_SECONDS_VARIABLE}={raw!r} must be a number of seconds > 0")
    return seconds


def compute_probe(device: torch.device) -> dict[str, float | int | str]:
    """The probe record for this rank: matmul TFLOPS everywhere, H2D bandwidth on GPUs only, each
    with its spread over PROBE_REPEATS slices."""
    start = time.perf_counter()
    record: dict[str, float | int | str] = {**matmul_tflops(device, probe_seconds())}
    if device.type == "cuda":
        record.update(h2d_gbps(device))
    record["probe_seconds"] = time.perf_counter() - start
    return record


@contextlib.contextmanager
def _no_sync(module: torch.nn.Module) -> Iterator[None]:
    if isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
    else:
        yield


COMPUTE_MIN_STEPS = 3  # timed steps at the least, however long each is (a CPU GPT-2 step is seconds)
COMPUTE_KEYS = ("compute_ms_per_step", "compute_steps", "compute_seconds", "compute_ms_per_step_min",
                "compute_ms_per_step_max", "compute_ms_per_step_repeats")


def compute_window(
    module: torch.nn.Module,
    forward_backward: Callable[[], object],
    device: torch.device,
    seconds: float | None = None,
    min_steps: int = COMPUTE_MIN_STEPS,
    warmup: int = 1,
) -> dict[str, float | int]:
    """This rank's compute speed: forward+backward steps with DDP's gradient all-reduce switched
    off, back to back for `seconds` (KT2T_PROBE_SECONDS, default 2 s) and at least `min_steps`.

    Under `no_sync()` backward runs no collective, so this is the rank's own compute; the
    gradients it leaves are dropped, so training is not changed (no optimizer step runs).
    Time-boxed like the matmul probe rather than a few steps, so the window spans many scheduling
    periods (a time-shared CPU) and many steps however short a GPU step is: the harness can then
    compare ranks at any step time. Each step ends with a device synchronisation, so the time is
    what the GPU really ran. `compute_ms_per_step` is the mean (total / steps), not the median:
    a node slowed in bursts (throttling, the local cluster's slow node) slows the mean only. The
    steps are also cut into PROBE_REPEATS consecutive runs, whose means give the window's own spread
    (`compute_ms_per_step_min`/`_max`), as the probe's slices do.
    """
    budget = probe_seconds() if seconds is None else seconds
    step_s: list[float] = []
    with _no_sync(module):
        for _ in range(warmup):
            forward_backward()
        synchronize(device)
        start = last = time.perf_counter()
        while len(step_s) < min_steps or last - start < budget:
            forward_backward()
            synchronize(device)
            now = time.perf_counter()
            step_s.append(now - last)
            last = now
    module.zero_grad(set_to_none=True)
    elapsed = last - start
    window = {"compute_ms_per_step": elapsed / len(step_s) * 1000, "compute_steps": len(step_s),
              "compute_seconds": elapsed}
    slices = sub_windows(step_s, PROBE_REPEATS)
    if len(slices) >= 2:
        means = [sum(part) / len(part) * 1000 for part in slices]
        window.update({"compute_ms_per_step_min": min(means), "compute_ms_per_step_max": max(means),
                       "compute_ms_per_step_repeats": len(means)})
    return window


def sub_windows(step_s: list[float], parts: int) -> list[list[float]]:
    """The steps cut into up to `parts` consecutive runs of about equal count (fewer steps: one
    each): each run's mean is one repeat of the compute window, for its spread."""
    parts = min(parts, len(step_s))
    if parts == 0:
        return []
    size, extra = divmod(len(step_s), parts)
    out, at = [], 0
    for i in range(parts):
        end = at + size + (1 if i < extra else 0)
        out.append(step_s[at:end])
        at = end
    return out
