"""Two ranks that leave a gloo worker thread waiting for the GIL as the process exits (issue 18).

The mechanism of the abort, made deterministic: rank 0 issues an all-reduce from a backward hook
(as DDP does, so the gloo work keeps the autograd context stash, a Python object) and drops its
handle; rank 1 joins once rank 0 is exiting (its first atexit handler leaves a marker file), while
its main thread holds the GIL without a break (a long C call in the last atexit handler). The worker that completes the
all-reduce needs the GIL to release the work. `--exit finalize` leaves like `python -m` does: the
interpreter finalizes, CPython ends the waiting thread inside a noexcept C++ destructor, and the
process aborts (`terminate called without an active exception`, SIGABRT). `--exit now` leaves
through workloads.program.exit_now, as every workload does, and must exit 0.
Run: torchrun --standalone --nproc_per_node=2 tests/workloads/exit_race.py --exit now
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import tempfile
import time
from pathlib import Path

if os.environ.get("RANK") == "0":
    # Registered before anything else, so it runs last: the GIL is held from here into the exit.
    atexit.register(sum, range(100_000_000))  # 2-4 s: rank 1 sees the marker and joins within it
    atexit.register(lambda: exiting_marker().touch())  # registered last, runs first

import torch
import torch.distributed as dist

from workloads.program import exit_now


def exiting_marker() -> Path:
    """Rank 0 is exiting: rank 1 joins the all-reduce then. Awaited, not assumed after a fixed delay
    (0.5 s before): a loaded host could hold rank 0 back longer, and the race then did not happen."""
    return Path(tempfile.gettempdir()) / f"exit-race-{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}.exiting"


PEER_TIMEOUT_S = 60  # for a rank 0 that never exits: a hang, not a speed target


def leave_an_all_reduce_to_finish_during_exit(rank: int) -> None:
    buffer = torch.ones(1024)
    handles: list[dist.Work] = []
    leaf = torch.ones(4, requires_grad=True)
    leaf.register_hook(lambda grad: handles.append(dist.all_reduce(buffer, async_op=True)) or grad)
    if rank == 1:
        deadline = time.monotonic() + PEER_TIMEOUT_S
        while not exiting_marker().exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"rank 1: rank 0 did not start exiting within {PEER_TIMEOUT_S} s "
                                 f"({exiting_marker()})")
            time.sleep(0.01)
        exiting_marker().unlink()
    (leaf * 2).sum().backward()
    if rank == 1:
        handles[0].wait()
    handles.clear()  # rank 0: the gloo worker now holds the only reference to the work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exit", choices=("finalize", "now"), required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    leave_an_all_reduce_to_finish_during_exit(dist.get_rank())
    print(f"rank {dist.get_rank()} leaving", flush=True)
    if args.exit == "now":
        exit_now(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
