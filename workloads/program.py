"""The life of every workload process: arguments, session, probe, training, report, and a clean exit.

Why the exit skips interpreter finalization (issue 18): `loss.backward()` stashes a copy of the
Python contextvars context in the thread-local state (torch/autograd/graph.py), and a collective
issued during backward (DDP's gradient all-reduce) keeps that state in its gloo work object. The
gloo worker thread that completes the all-reduce releases the work, and releasing the context
needs the GIL. If the worker asks for the GIL just as the main thread enters interpreter
finalization (the main thread reaches it a few ms after the last all-reduce; on a loaded machine
the worker can be off the CPU that long), CPython (3.11, 3.12) ends the worker with pthread_exit
inside take_gil, the forced unwind meets a noexcept C++ destructor (~AsyncWork) and the process
aborts: `terminate called without an active exception`, SIGABRT, exit code -6, after the rank had
printed its metrics. Joining the worker threads first is not possible: once DDP has used the
process group, torch keeps it (and its threads) alive after destroy_process_group(). So, after the
session has destroyed the process group, `exit_now` joins Python threads, runs the atexit handlers,
flushes stdio and ends the process with os._exit: there is no finalization for a thread to die in.
tests/workloads/exit_race.py reproduces the abort deterministically.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

import torch.distributed as dist

from workloads.distributed import EnvError, Session, distributed_session
from workloads.metric_lines import Reporter
from workloads.probe import compute_probe

Train = Callable[[argparse.Namespace, Session, Reporter], "int | None"]
Main = Callable[["list[str] | None"], int]


def new_parser(module: str, doc: str | None, *, precision: bool) -> argparse.ArgumentParser:
    """The parser every workload starts from: --device, and --precision where it trains with autocast."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    options = {
        "--device": (
            ("auto", "cpu", "cuda"),
            "auto: cuda:<local rank> when GPUs are visible and NUM_GPUS_PER_NODE is not 0, else cpu",
        ),
    }
    if precision:
        options["--precision"] = (
            ("auto", "bf16", "fp32"),
            "auto: bf16 autocast where the hardware has native bf16 (GPU, or a CPU with AVX512-BF16/AMX), else fp32",
        )
    for flag, (choices, help_text) in options.items():
        parser.add_argument(flag, choices=choices, default="auto", help=help_text)
    return parser


def workload_main(workload: str, parse_args: Callable[[list[str] | None], argparse.Namespace], train: Train) -> Main:
    """main(argv) for a workload: parse, open the session, probe this rank's device, train.

    The probe runs after a barrier, so that ranks sharing a machine measure at the same time, and
    before any training, so no collective is in its timed region.
    """

    def main(argv: list[str] | None = None) -> int:
        args = parse_args(argv)
        with distributed_session(args.device) as session:
            dist.barrier()
            reporter = Reporter(workload, session, compute_probe(session.device))
            return train(args, session, reporter) or 0

    return main


def exit_now(code: int) -> NoReturn:
    """End the process with code after what a normal exit does, minus interpreter finalization.

    Python threads are joined and atexit handlers run (as at a normal exit), then stdio is flushed
    and os._exit ends the process: see the module docstring for the abort this avoids.
    """
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A closed or broken pipe: nothing more can be said there, and the exit code still counts.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run_main(module: str, main: Main) -> NoReturn:
    """Run a workload's main and exit with its code; a launcher-variable problem is one stderr line
    and exit code 2, a closed stdout one line and exit code 1, an exception its traceback and exit
    code 1."""
    try:
        code = main(None)
    except EnvError as err:
        print(f"{module}: {err}", file=sys.stderr, flush=True)
        code = 2
    except SystemExit as stop:  # argparse: --help (0) or a usage error (2)
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    except BrokenPipeError:
        # stdout's reader left (`--plan | head`): one line, not a traceback; the code still says so
        print(f"{module}: standard output closed before the program ended", file=sys.stderr, flush=True)
        code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_now(code)
