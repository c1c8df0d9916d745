"""A container's processes: its main process leads a session of its own (started with setsid), and
every process of that session, and every descendant of one, belongs to the container.

A runtime kills a container's whole pid namespace; here the session and the process tree stand in
for it. The process group alone is not enough: OpenMPI's orted puts each rank it starts in a group
of its own, still in the session; and torchrun starts each worker in a session of its own (torch's
SubprocessHandler: start_new_session=True), still its child. A process that left the tree (its
parent died and it was reparented) is no longer found.
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


def _live_processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session) of every live (not zombie) process, from one /proc scan."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields and fields[0] not in ("Z", "X"):
                table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def members_of_sessions(session_ids: Collection[int]) -> dict[int, int]:
    """The processes of these containers, pid -> the container's session: the sessions' members and
    their descendants in other sessions."""
    table = _live_processes()
    members = {pid: session for pid, (_, session) in table.items() if session in session_ids}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    pending = list(members)
    while pending:
        parent = pending.pop()
        for child in children.get(parent, ()):
            if child not in members:
                members[child] = members[parent]
                pending.append(child)
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
