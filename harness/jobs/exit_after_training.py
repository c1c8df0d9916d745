"""A pod that failed after its ranks finished training: the failure message must say so.

When a rank prints its KT2T_METRICS line (training done, metrics reported) and its process then
dies on the way out (typically SIGABRT: `terminate called without an active exception`, exit
code 134 or torchrun's `exitcode: -6`), the test still fails: the exit is the cluster's or the
image's problem and a gate must not hide it. But the message must not read like a training
failure: it says that training completed, how the process ended (signal, exit code) and where
the metrics line is; the pod's last lines follow it as for any failure.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from pathlib import Path

from harness.cluster.logs import CapturedLog
from harness.cluster.pods import container_statuses
from harness.cluster.resources import Obj
from harness.metrics.log_lines import METRICS_MARKER, Malformed, decode_record, split_tag

ABORT_TEXT = "terminate called without an active exception"
MAX_RANKS_NAMED = 8


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _signal_from_line(line: str) -> str | None:
    """torchrun's `exitcode: -6` / `exitcode -6 (SIGABRT)`, mpirun's `exited on signal 6 (Aborted)`."""
    for marker in ("exitcode: -", "exitcode -", "exited on signal "):
        at = line.find(marker)
        if at >= 0:
            digits = line[at + len(marker):].split(maxsplit=1)[0].rstrip(").,")
            if digits.isascii() and digits.isdigit() and 0 < int(digits) < 65:
                return f"{_signal_name(int(digits))} ({line[at:at + len(marker) + len(digits)]})"
    return None


def _rank(text: str, at: int, tag: int | None) -> int:
    """The rank of a KT2T_METRICS line (its tag's when the record cannot be read; -1: unknown)."""
    try:
        record = decode_record(text, at, METRICS_MARKER)
    except Malformed:
        record = None
    rank = record.get("rank") if isinstance(record, dict) else None
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank
    return tag if tag is not None else -1


def _scan(path: Path) -> tuple[list[tuple[int, str]], list[str]]:
    """(rank, file:line) of each KT2T_METRICS line, and how the log says a process ended."""
    reported: list[tuple[int, str]] = []
    endings: list[str] = []
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            tag, text = split_tag(line)
            if (at := text.find(METRICS_MARKER + " {")) >= 0:
                reported.append((_rank(text.rstrip("\n"), at, tag), f"{path.name}:{number}"))
            elif ABORT_TEXT in text:
                endings.append(f"SIGABRT ('{ABORT_TEXT}')")
            elif (ending := _signal_from_line(text)) is not None:
                endings.append(ending)
    return reported, endings


def _container_ending(pod: Obj | None) -> str | None:
    for status in container_statuses(pod or {}):
        terminated = status.get("state", {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if isinstance(code, int) and code != 0:
            killed = f", {_signal_name(code - 128)}" if 128 < code < 128 + 65 else ""
            return f"container {status.get('name')} exit code {code}{killed}"
    return None


def explain(message: str, logs: Iterable[CapturedLog], pod: Obj | None) -> str:
    """The failure message, rewritten when the pod's ranks had reported their metrics before it failed."""
    reported: list[tuple[int, str]] = []
    endings: list[str] = []
    for entry in logs:
        if entry.path.exists():
            found, ended = _scan(entry.path)
            reported += found
            endings += ended
    if not reported:
        return message
    ranks = sorted({rank for rank, _ in reported if rank >= 0})
    shown = ", ".join(map(str, ranks[:MAX_RANKS_NAMED])) + (" ..." if len(ranks) > MAX_RANKS_NAMED else "")
    how = "; ".join(dict.fromkeys(filter(None, [_container_ending(pod), *endings]))) or "a non-zero exit"
    return (f"{message}: training completed (rank{'s' if len(ranks) != 1 else ''} {shown or '?'} printed "
            f"KT2T_METRICS, first at {reported[0][1]}), then the process aborted at exit ({how}); the exit is the "
            "cluster's or the image's problem, not a training failure, and still fails the test")
