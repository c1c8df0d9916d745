"""An elastic torchrun worker's command (harness/jobs/launchers/torchrun.py ELASTIC_ENTRY), run by a
real shell as a container runs it: worker 0 of the Indexed Job, and only it, is told it hosts the
c10d rendezvous store, and torchrun gets every argument of the pod unchanged."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.jobs.launchers.torchrun import ELASTIC_ENTRY

ARGS = ["--nnodes=1:2", "--rdzv-backend=c10d", "--rdzv-endpoint=job-0.job:29500", "-m", "workloads.nanogpt",
        "--checkpoint-dir", "/tmp/a b"]


def run_entry(tmp_path: Path, index: str | None) -> list[str]:
    """The arguments a stand-in `torchrun` on PATH receives, one a line."""
    fake = tmp_path / "torchrun"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = index
    done = subprocess.run(["sh", "-c", ELASTIC_ENTRY, "torchrun", *ARGS], env=env, capture_output=True,
                          text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize(("index", "hosts"), [("0", "true"), ("1", "false"), ("12", "false"), (None, "false")])
def test_only_worker_0_hosts_the_store(tmp_path: Path, index: str | None, hosts: str):
    assert run_entry(tmp_path, index) == [f"--rdzv-conf=is_host={hosts}", *ARGS]


def test_the_kubelet_leaves_the_entry_alone():
    """The kubelet expands $(NAME) in a command; the entry has none, so it reaches the shell as written."""
    assert "$(" not in ELASTIC_ENTRY
