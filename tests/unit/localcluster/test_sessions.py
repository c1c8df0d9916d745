"""A container's processes: its session and every descendant, also one that started its own session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from polling import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.hostnodes.sessions import members_of_sessions, signal_container

# The container's main process (a session leader) starts a child in a session of its own, as
# torchrun starts its workers, then both sleep.
SPAWN = ("import subprocess, sys, time; "
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
         "print(child.pid, flush=True); time.sleep(60)")


def test_a_descendant_in_another_session_belongs_to_the_container():
    main = subprocess.Popen([sys.executable, "-c", SPAWN], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert main.stdout is not None
        worker = int(main.stdout.readline())
        assert os.getsid(worker) != main.pid  # the worker left the container's session
        members = members_of_sessions({main.pid})
        assert members == {main.pid: main.pid, worker: main.pid}
        signal_container(main.pid, signal.SIGKILL)
        # A deadline for a worker that survives, not a speed target: SIGKILL ends both at once, and
        # a loaded host may take a while to reap them (5 s before).
        wait_for(lambda: not members_of_sessions({main.pid}), 30, "the worker to end with its container")
    finally:
        main.kill()
        main.wait()
