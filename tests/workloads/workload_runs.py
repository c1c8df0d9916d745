"""Launching workloads from tests and checking what they report (shared by tests/workloads)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Variables a developer's shell or an outer launcher may carry that would change rank discovery.
LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NUM_GPUS_PER_NODE",
    "NCCL_TESTS_MIN_BW",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def metrics(self) -> list[dict]:
        """Every rank's KT2T_METRICS record, sorted by rank; each line must be valid JSON."""
        records = [
            json.loads(line.split("KT2T_METRICS ", 1)[1])
            for line in self.stdout.splitlines()
            if line.startswith("KT2T_METRICS ")
        ]
        return sorted(records, key=lambda r: r["rank"])

    def explain(self) -> str:
        return (
            f"exit {self.returncode}\n--- stdout (tail)\n{self.stdout[-3000:]}"
            f"\n--- stderr (tail)\n{self.stderr[-3000:]}"
        )


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("OMPI_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["NUM_GPUS_PER_NODE"] = "0"  # CPU and gloo even on a developer machine with a GPU
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_trained(run: Run, workload: str, expected_first_loss: float, tolerance: float) -> list[dict]:
    """The checks every workload must pass: exit 0, both ranks reported, the first loss is that of a
    uniform guess, the loss fell, and DDP kept the parameters identical on every rank."""
    assert run.returncode == 0, run.explain()
    metrics = run.metrics
    assert [m["rank"] for m in metrics] == [0, 1], run.explain()
    for m in metrics:
        assert m["workload"] == workload
        assert m["world_size"] == 2
        assert m["node"]
        assert math.isclose(m["loss_first"], expected_first_loss, abs_tol=tolerance), m
        assert m["loss_last"] < m["loss_first"] - 0.1, m
    checksums = {m["params_checksum"] for m in metrics}
    assert len(checksums) == 1, f"ranks disagree on parameters: {checksums}"
    return metrics


def assert_harness_parses(run: Run, tmp_path: Path, workload: str) -> dict:
    """The log is understood by the harness's parser (`python -m harness.metrics`)."""
    log = tmp_path / f"{workload}.log"
    log.write_text(run.stdout)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.metrics", str(log)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)
    assert parsed["workload"] == workload
    assert sorted(r["rank"] for r in parsed["ranks"]) == [0, 1]
    return parsed
