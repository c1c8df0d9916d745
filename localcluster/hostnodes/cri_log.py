"""Container log files in the CRI format kwok serves through `pods/log`: `<time> <stream> <F|P> <text>`.

A container run's output is copied line by line as the process writes it (lines past 16 KiB are
split into `P` records, as container runtimes do, so memory stays bounded whatever it prints); a
marker file beside the log says the container has exited, so that a `follow` ends there.
"""

from __future__ import annotations

import contextlib
import os
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO

MAX_LINE_BYTES = 16 * 1024
READ_BYTES = 64 * 1024


def cri_stamp(moment: datetime | None = None) -> str:
    """RFC 3339 with nanoseconds, as runtimes write it."""
    return (moment or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def cri_lines(lines: list[str], start: datetime) -> str:
    """Plain lines (a canned log) -> CRI records on stdout, a microsecond apart."""
    return "".join(f"{cri_stamp(start + timedelta(microseconds=i))} stdout F {line}\n" for i, line in enumerate(lines))


class CriLogWriter:
    """One container run's log file: both streams, line by line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file: IO[bytes] = open(path, "ab", buffering=0)  # noqa: SIM115 (closed by close())
        self.lock = threading.Lock()

    def pump(self, stream: IO[bytes], name: str) -> None:
        """Copies a pipe into the log as the process writes it, until the pipe closes."""
        tag = name.encode()
        pending = b""
        fd = stream.fileno()
        while chunk := os.read(fd, READ_BYTES):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            entries = [(line, b"F") for line in lines]
            while len(pending) >= MAX_LINE_BYTES:
                entries.append((pending[:MAX_LINE_BYTES], b"P"))
                pending = pending[MAX_LINE_BYTES:]
            self.write(tag, entries)
        if pending:
            self.write(tag, [(pending, b"F")])
        stream.close()

    def write(self, stream: bytes, entries: list[tuple[bytes, bytes]]) -> None:
        if not entries:
            return
        stamp = cri_stamp().encode()
        data = b"".join(b"%s %s %s %s\n" % (stamp, stream, flag, line.rstrip(b"\r")) for line, flag in entries)
        with self.lock:
            self.file.write(data)

    def note(self, text: str) -> None:
        """A line of the agent's own (why a container did not start) in the container's log."""
        self.write(b"stderr", [(text.encode(), b"F")])

    def close(self) -> None:
        self.file.close()


def exited_marker(log_file: Path) -> Path:
    """Next to a container log: the container has exited. kwok (patched by build-binaries.sh)
    then ends a `follow` of that log at its end, as the kubelet does when a container stops."""
    return log_file.with_name(log_file.name + ".exited")


def mark_exited(log_file: Path) -> None:
    with contextlib.suppress(OSError):
        exited_marker(log_file).touch()


def rotate_log(current: Path) -> None:
    """The finished run's log becomes `previous.log` (`kubectl logs --previous`), marker included."""
    with contextlib.suppress(OSError):
        os.replace(current, current.with_name("previous.log"))
    with contextlib.suppress(OSError):
        os.replace(exited_marker(current), exited_marker(current.with_name("previous.log")))
