"""The machine-readable lines every workload prints on every rank: `KT2T_STEP` per step, `KT2T_METRICS` at the end.

The harness's parser and verdict are written against this contract (also in workloads/README.md).
Both lines are `PREFIX {compact JSON}` on stdout, each a single write(2) (ranks sharing a pipe
never interleave mid-line). JSON has no NaN or Infinity: a non-finite value is written as `null`
and its key is listed in `"nonfinite"`, so a diverged loss is visible rather than silently absent.

`KT2T_STEP {"rank":R,"step":S,"loss":X,"ms":T,...}`, one per step:
- `rank` (int); `step` (int): 0-based and counted over the whole job, so a run resumed from a
  checkpoint at step 20 continues at 20.
- `loss` (float or null): this rank's loss on its own batch; training workloads only.
- `ms` (float): wall time of the step on this rank, communication included; absent where unknown.
- workload extras: nanogpt `lr`; allreduce (a step is one message size) `bytes`, `algbw`, `busbw`
  (GB/s), `wrong`.
- `nonfinite` (list of keys): present only when a value above was NaN or infinite.
- How many: every step of the first STEP_LINES_IN_FULL (1000) steps a process runs, then every
  STEP_LINES_EVERY-th (100th) step number, and always the last step, so a long run's log stays
  bounded (a million steps give about 11,000 lines per rank).

`KT2T_METRICS {...}`, once per rank when the run completed:
- identity: `workload`, `rank`, `world_size`, `local_rank`, `node` (NODE_NAME, else the host
  name), `host_boot_id` (the kernel's boot id: equal on nodes that share one host's CPUs; null where
  unknown), `pod` (POD_NAME; null when unset), `device`, `backend`, `launcher`, `restart_count`.
- accelerator (workloads/distributed.py): `device` is `cuda:<local rank>` or `cpu`;
  `device_requested` what this process was asked for (`cuda` for ACCELERATOR=nvidia or --device
  cuda, `cpu`, or `auto` when neither said); `gpus_visible` torch.cuda.device_count() (0 without
  CUDA); `gpus_per_node` NUM_GPUS_PER_NODE (what this node shows when unset); `local_world_size`
  the processes the launcher put on this node; `gpu_name` torch.cuda.get_device_name() of the
  rank's GPU, null on CPU. With `device_requested` `cuda` a rank that has no usable GPU prints no
  record at all: it exits 2 before training, naming what is missing.
- progress: `steps_requested` (the steps the job was asked for) and `steps_completed` (the last
  step's number + 1, so a resumed run that reached the end reports all of them).
- loss (training workloads): `loss_first`, `loss_last` (this process's first and last step; after a
  restart, the resumed part), `loss_expected_first` (the loss of a uniform guess).
- throughput, one key per workload: bert `throughput` (samples/s), nanogpt `tokens_per_s`, mnist
  `samples_per_s`, allreduce `busbw_avg` and `busbw_max` (GB/s).
- compute probe, measured before training with no collective in the timed region (workloads/probe.py):
  `probe_matmul_tflops`, `probe_matmul_n`, `probe_matmul_dtype`, `probe_seconds`, and on GPUs
  `probe_h2d_gbps`; each rate is the median of PROBE_REPEATS slices timed apart, with `<key>_min`,
  `<key>_max` and `<key>_repeats` beside it (its own spread); training workloads add the compute
  window (workloads/probe.py compute_window): `compute_ms_per_step`, the mean milliseconds of one
  step's forward+backward under DDP's no_sync() (no all-reduce), over `compute_steps` steps timed back to back for
  `compute_seconds` seconds (at least the probe's length, KT2T_PROBE_SECONDS, and 3 steps), to set
  beside the step time that includes communication; `compute_ms_per_step_min`/`_max`/`_repeats`:
  the means of the window's steps cut into consecutive runs (its spread). Under FSDP (nanogpt
  `sharding: fsdp`) the window includes the all-gathers and reduce-scatters FSDP cannot compute without.
- `params_checksum` (training workloads): equal on every rank when DDP kept the replicas in sync; under
  FSDP the sum over the shards (no rank holds a replica), the same on every rank by construction.
- nanogpt `sharding` (`ddp` or `fsdp`) and `memory_plan_bytes`: the memory plan's choice and its
  estimate of one rank's memory (workloads/sharding.py), also printed as rank 0's `memory plan:` line.
- `nonfinite`: the keys written as null because their value was NaN or infinite (`[]` when none).
- workload-specific keys besides (e.g. nanogpt `iterations`, `final_step`, `mfu`; bert `steps`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping

import torch

from workloads.distributed import Session, host_boot_id, node_name, pod_name, visible_gpus

METRICS_PREFIX = "KT2T_METRICS "
STEP_PREFIX = "KT2T_STEP "
STEP_LINES_IN_FULL = 1000
STEP_LINES_EVERY = 100


def say(line: str) -> None:
    """Print a line the harness parses as one write(2) on fd 1.

    Ranks of one pod share the pipe; print() may issue the text and the newline as separate
    writes, so two ranks' lines could interleave mid-line. A single write below PIPE_BUF (4 KiB)
    is atomic on a pipe.
    """
    sys.stdout.flush()  # keep ordering with anything print()ed before
    data = (line + "\n").encode("utf-8", errors="replace")
    while data:
        data = data[os.write(sys.stdout.fileno(), data) :]


def params_checksum(parameters: Iterable[torch.Tensor]) -> float:
    """Sum of every parameter in float64, in a fixed order.

    After DDP every rank holds bit-identical parameters, so equal checksums across ranks are the
    cheap proof that gradients really were all-reduced; any divergence shows in the low bits.
    """
    total = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for p in parameters:
            total += p.detach().to(device="cpu", dtype=torch.float64).sum()
    return float(total.item())


def encode(prefix: str, record: Mapping[str, object], *, always_list_nonfinite: bool) -> str:
    """`prefix{compact json}` with every NaN/inf float written as null and named in "nonfinite"."""
    clean: dict[str, object] = {}
    nonfinite: list[str] = []
    for key, value in record.items():
        finite = not (isinstance(value, float) and not math.isfinite(value))
        clean[key] = value if finite else None
        if not finite:
            nonfinite.append(key)
    if nonfinite or always_list_nonfinite:
        clean["nonfinite"] = nonfinite
    return prefix + json.dumps(clean, separators=(",", ":"), allow_nan=False)


def accelerator_fields(session: Session) -> dict[str, object]:
    """What the rank was asked for and what it found: the verdict judges a GPU run on these."""
    device = session.device
    return {
        "device_requested": session.accelerator,
        "gpus_visible": visible_gpus(),
        "gpus_per_node": session.env.gpus_per_node,
        "local_world_size": session.env.local_world_size,
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
    }


class Reporter:
    """One rank's KT2T_STEP lines and its final KT2T_METRICS record (the contract above).

    It remembers the first and last loss and the last step, so every workload reports them under
    the same keys, and it adds the rank's identity and compute probe to the final record.
    """

    def __init__(self, workload: str, session: Session, probe: Mapping[str, object]) -> None:
        self.workload = workload
        self.session = session
        self.probe = dict(probe)
        self.steps_requested: int | None = None
        self.loss_first: float | None = None
        self.loss_last: float | None = None
        self._steps_run = 0
        self._last_step: int | None = None
        self._unprinted: dict[str, object] | None = None

    def step(self, step: int, loss: float | None = None, ms: float | None = None, **values: object) -> None:
        """Record one finished step; prints its KT2T_STEP line unless the bound leaves it out."""
        record: dict[str, object] = {"rank": self.session.env.rank, "step": step}
        if loss is not None:
            record["loss"] = loss
            self.loss_last = loss
            if self.loss_first is None:
                self.loss_first = loss
        if ms is not None:
            record["ms"] = ms
        record.update(values)
        self._steps_run += 1
        self._last_step = step
        if self._steps_run <= STEP_LINES_IN_FULL or step % STEP_LINES_EVERY == 0:
            say(encode(STEP_PREFIX, record, always_list_nonfinite=False))
            self._unprinted = None
        else:
            self._unprinted = record  # printed by finish() if it turns out to be the last

    def finish(self, metrics: Mapping[str, object]) -> None:
        """Print the rank's KT2T_METRICS record: identity, progress, loss, probe, then metrics."""
        if self._unprinted is not None:
            say(encode(STEP_PREFIX, self._unprinted, always_list_nonfinite=False))
            self._unprinted = None
        env = self.session.env
        record: dict[str, object] = {
            "workload": self.workload,
            "rank": env.rank,
            "world_size": env.world_size,
            "local_rank": env.local_rank,
            "node": node_name(),
            "host_boot_id": host_boot_id(),
            "pod": pod_name(),
            "device": str(self.session.device),
            "backend": self.session.backend,
            **accelerator_fields(self.session),
            "launcher": env.launcher,
            "restart_count": env.restart_count,
            "steps_requested": self.steps_requested,
            "steps_completed": 0 if self._last_step is None else self._last_step + 1,
        }
        if self.loss_first is not None:
            record["loss_first"] = self.loss_first
            record["loss_last"] = self.loss_last
        record.update(self.probe)
        record.update(metrics)
        say(encode(METRICS_PREFIX, record, always_list_nonfinite=True))
