"""hack/main-job's last lines (issue 46): the local cluster it started is still running after the
summary, and it says so, what runs, and the exact command that brings it down; KT2T_DOWN_AFTER=1
brings it down instead. The script's end is run on its own, with a stand-in hack/local-cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
START = "# The cluster outlives the job"


def run_end(tmp_path: Path, **env: str) -> tuple[str, str]:
    text = (REPO / "hack" / "main-job").read_text()
    assert START in text, "hack/main-job no longer ends by saying what it leaves running"
    (tmp_path / "hack").mkdir()
    calls = tmp_path / "calls"
    stand_in = tmp_path / "hack" / "local-cluster"
    stand_in.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                        '[ "$1" = status ] && echo "kube-apiserver pid 42 port 6443"\nexit 0\n')
    stand_in.chmod(0o755)
    script = "status=0 nodes=real kubeconfig=/k/config\n" + text[text.index(START):]
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env}, check=True)
    return done.stdout, calls.read_text() if calls.exists() else ""


def test_it_says_the_cluster_runs_and_how_to_bring_it_down(tmp_path: Path):
    out, calls = run_end(tmp_path, KT2T_STATE="/var/tmp/s", KT2T_PORT_OFFSET="3700")
    assert "local cluster: still running" in out and "kubelets, containerd and the image registry" in out, out
    assert "  kube-apiserver pid 42 port 6443" in out, out
    assert "bring it down with: KT2T_STATE=/var/tmp/s KT2T_PORT_OFFSET=3700 hack/local-cluster down" in out, out
    assert calls == "status\n"


def test_kt2t_down_after_brings_it_down(tmp_path: Path):
    out, calls = run_end(tmp_path, KT2T_DOWN_AFTER="1")
    assert "bringing it down" in out and "still running" not in out, out
    assert calls == "down\n"
