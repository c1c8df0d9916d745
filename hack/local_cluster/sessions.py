"""A container's processes: its main process leads a session of its own (started with setsid), and
every process of that session belongs to the container.

A runtime kills a container's whole pid namespace; here the session stands in for it. The process
group alone is not enough: OpenMPI's orted puts each rank it starts in a group of its own, still in
the session.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def _stat_fields(pid: str) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        return (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(session_id: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and int(fields[3]) == session_id and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


def signal_container(session_id: int, sig: signal.Signals) -> None:
    """Signals the container's process group, then any member that left it (same session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, sig)
    for pid in session_members(session_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def container_alive(session_id: int) -> bool:
    return bool(session_members(session_id))
