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
from collections.abc import Collection
from pathlib import Path


def _stat_fields(pid: str) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        return (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def members_of_sessions(session_ids: Collection[int]) -> dict[int, int]:
    """Live (not zombie) processes of any of these sessions, pid -> session, from one /proc scan."""
    members = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and int(fields[3]) in session_ids and fields[0] not in ("Z", "X"):
                members[int(entry)] = int(fields[3])
    return members


def session_members(session_id: int) -> list[int]:
    """Live (not zombie) processes of a session."""
    return list(members_of_sessions({session_id}))


def signal_process(pid: int, sig: signal.Signals) -> None:
    """A process that is gone (or no longer ours) needs no signal."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_container(session_id: int, sig: signal.Signals) -> None:
    """Signals the container's process group, then any member that left it (same session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, sig)
    for pid in session_members(session_id):
        signal_process(pid, sig)


def container_alive(session_id: int) -> bool:
    return bool(session_members(session_id))
