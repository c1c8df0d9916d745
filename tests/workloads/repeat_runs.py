"""Run one workload's 2-rank job many times and report how every rank exited (issue 18's repeat test).

Usage: python tests/workloads/repeat_runs.py WORKLOAD RUNS OUTDIR [--parallel K] [--elastic] -- ARGS...

Each run is `python -m workloads.WORKLOAD ARGS` on 2 ranks (torchrun's variables, env://
rendezvous on a fresh port), with the ranks forked from this process after it imported the
workload once: torch, transformers and Lightning take 3-8 s to import per rank on a 2-core machine,
which would leave room for only a few dozen runs in CI. A forked rank runs the module as
`python -m` does and leaves the same way: a SystemExit travels up to this script's top level, so
the interpreter finalizes as after `python -m` (where issue 18's abort happened), and a module that
ends with os._exit ends there. `{run}` in ARGS becomes the run's folder (e.g. for checkpoints).

--elastic: each run is two attempts, as torchrun's elastic agent makes them. The first must lose
a rank (ARGS inject the failure, e.g. `--fail-at-step 3`); the survivors are sent SIGTERM, as the
agent does, and both ranks start again with TORCHELASTIC_RESTART_COUNT=1, resume and must finish.

Prints one JSON line per run: {"run", "seconds", "ok", "attempts": [[{"rank", "exit", "signal",
"metrics"}, ...], ...]}; each rank's stdout and stderr stay under OUTDIR/RUN/ATTEMPT/.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import time
from pathlib import Path

WORLD_SIZE = 2
INJECTED_FAILURE_EXIT = 17  # workloads.nanogpt --fail-at-step


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def become_rank(workload: str, args: list[str], rank: int, port: int, restart: int, folder: Path) -> None:
    """In the forked child: take the rank's variables and output files, then run the module."""
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD_SIZE),
            "LOCAL_WORLD_SIZE": str(WORLD_SIZE),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": str(restart),
        }
    )
    for fd, name in ((1, f"rank{rank}.out"), (2, f"rank{rank}.err")):
        target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = [f"workloads.{workload}", *args]
    runpy.run_module(f"workloads.{workload}", run_name="__main__", alter_sys=True)
    sys.exit(0)  # the module returned without exiting: what `python -m` does next


def start_ranks(workload: str, args: list[str], restart: int, folder: Path) -> dict[int, int]:
    """Fork the ranks of one attempt; returns {pid: rank}."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    pids = {}
    for rank in range(WORLD_SIZE):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            become_rank(workload, args, rank, port, restart, folder)  # never returns
        pids[pid] = rank
    return pids


def wait_ranks(pids: dict[int, int], folder: Path, *, stop_survivors: bool) -> list[dict[str, object]]:
    """How each rank exited and whether it printed its metrics. With stop_survivors, the first rank
    to exit non-zero gets its peers SIGTERM, as torchrun's agent does before restarting the group."""
    exits: dict[int, int] = {}
    while len(exits) < len(pids):
        pid, status = os.wait()
        if pid not in pids:
            continue
        exits[pid] = status
        failed = os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
        if stop_survivors and failed:
            for other in pids.keys() - exits.keys():
                os.kill(other, signal.SIGTERM)
    ranks = []
    for pid, rank in sorted(pids.items(), key=lambda item: item[1]):
        status = exits[pid]
        stdout = (folder / f"rank{rank}.out").read_text(errors="replace")
        ranks.append(
            {
                "rank": rank,
                "exit": None if os.WIFSIGNALED(status) else os.WEXITSTATUS(status),
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "metrics": "KT2T_METRICS " in stdout,
            }
        )
    return ranks


def completed(ranks: list[dict[str, object]]) -> bool:
    return all(r["exit"] == 0 and r["metrics"] for r in ranks)


def one_run(workload: str, args: list[str], folder: Path, *, elastic: bool) -> dict[str, object]:
    args = [arg.replace("{run}", str(folder)) for arg in args]
    started = time.perf_counter()
    attempts = []
    if elastic:
        first = wait_ranks(start_ranks(workload, args, 0, folder / "0"), folder / "0", stop_survivors=True)
        attempts.append(first)
        if not any(r["exit"] == INJECTED_FAILURE_EXIT for r in first):
            return {"seconds": round(time.perf_counter() - started, 2), "ok": False, "attempts": attempts}
    restart = len(attempts)
    last = folder / str(restart)
    attempts.append(wait_ranks(start_ranks(workload, args, restart, last), last, stop_survivors=False))
    return {"seconds": round(time.perf_counter() - started, 2), "ok": completed(attempts[-1]), "attempts": attempts}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("runs", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--parallel", type=int, default=1, help="runs at the same time")
    parser.add_argument("--elastic", action="store_true", help="each run loses a rank and restarts")
    split = argv.index("--") if "--" in argv else len(argv)
    parsed = parser.parse_args(argv[:split])
    parsed.args = argv[split + 1 :]  # the workload's own arguments
    return parsed


def main(argv: list[str]) -> int:
    opts = parse_args(argv)
    # Import once, here, so the forked ranks inherit torch & co.; then forget the module itself so
    # that each rank executes it afresh as __main__, as `python -m` does.
    importlib.import_module(f"workloads.{opts.workload}")
    del sys.modules[f"workloads.{opts.workload}"]
    importlib.import_module("torch._dynamo")  # what torch.optim imports on first use (~1 s)
    for first in range(0, opts.runs, opts.parallel):
        batch = range(first, min(first + opts.parallel, opts.runs))
        # One process per run when several run at once: each waits for its own ranks.
        children = {}
        for run in batch:
            pid = os.fork() if opts.parallel > 1 else 0
            if pid == 0:
                result = one_run(opts.workload, opts.args, opts.out / str(run), elastic=opts.elastic)
                print(json.dumps({"run": run, **result}), flush=True)
                if opts.parallel > 1:
                    os._exit(0)
            else:
                children[pid] = run
        for pid in children:
            os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
