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
POD_NAME = "kt2t-test-pod"
PROBE_SECONDS = 0.3
TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
# Variables a developer's shell or an outer launcher may carry that would change rank discovery.
LAUNCHER_VARS = (
    "ACCELERATOR",
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

    def records(self, prefix: str) -> list[dict]:
        """Every `PREFIX {json}` line's record, in output order; each line must be valid JSON."""
        return [json.loads(line[len(prefix) :]) for line in self.stdout.splitlines() if line.startswith(prefix)]

    @property
    def metrics(self) -> list[dict]:
        """Every rank's KT2T_METRICS record, sorted by rank."""
        return sorted(self.records("KT2T_METRICS "), key=lambda r: r["rank"])

    @property
    def steps(self) -> dict[int, list[dict]]:
        """Every rank's KT2T_STEP records in the order printed, by rank."""
        by_rank: dict[int, list[dict]] = {}
        for record in self.records("KT2T_STEP "):
            by_rank.setdefault(record["rank"], []).append(record)
        return dict(sorted(by_rank.items()))

    def explain(self) -> str:
        return (
            f"exit {self.returncode}\n--- stdout (tail)\n{self.stdout[-3000:]}"
            f"\n--- stderr (tail)\n{self.stderr[-3000:]}"
        )


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("OMPI_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["NUM_GPUS_PER_NODE"] = "0"  # CPU and gloo even on a developer machine with a GPU
    env["POD_NAME"] = POD_NAME  # what the harness's manifests pass down; reported as "pod"
    env["KT2T_PROBE_SECONDS"] = str(PROBE_SECONDS)  # shorter than the 2 s default: these runs are many
    env.update(extra or {})
    return env


def run_python(*args: str, env: Mapping[str, str] | None = None, timeout: float) -> subprocess.CompletedProcess:
    """`python ARGS` from the repository root with a clean launcher environment, output captured."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def assert_trained(run: Run, workload: str, expected_first_loss: float, tolerance: float) -> list[dict]:
    """The checks every workload must pass: exit 0, both ranks reported, the first loss is that of a
    uniform guess, the loss fell, and DDP kept the parameters identical on every rank."""
    assert run.returncode == 0, run.explain()
    metrics = assert_reported(run, workload, training=True)
    for m in metrics:
        assert math.isclose(m["loss_first"], expected_first_loss, abs_tol=tolerance), m
        assert m["loss_last"] < m["loss_first"] - 0.1, m
    checksums = {m["params_checksum"] for m in metrics}
    assert len(checksums) == 1, f"ranks disagree on parameters: {checksums}"
    return metrics


def assert_reported(run: Run, workload: str, *, training: bool) -> list[dict]:
    """The KT2T_METRICS contract (workloads/metric_lines.py) on both ranks: identity, progress, probe,
    everything finite; and a KT2T_STEP line per step on every rank, in order."""
    metrics = run.metrics
    assert [m["rank"] for m in metrics] == [0, 1], run.explain()
    for m in metrics:
        assert (m["workload"], m["world_size"], m["pod"]) == (workload, 2, POD_NAME), m
        assert m["node"]
        assert m["steps_completed"] == m["steps_requested"] > 0, m
        assert m["probe_matmul_tflops"] > 0 and m["probe_matmul_dtype"] == "float32", m
        assert PROBE_SECONDS <= m["probe_seconds"] < PROBE_SECONDS + 1.0, m  # time-boxed, plus a warm-up
        assert m["nonfinite"] == [], m
        # NUM_GPUS_PER_NODE=0, no ACCELERATOR (clean_env): auto, which is CPU here.
        assert (m["device"], m["backend"], m["device_requested"], m["gpu_name"]) == ("cpu", "gloo", "auto", None), m
        assert m["gpus_visible"] == 0 and m["local_world_size"] == 2, m
        if training:
            assert m["compute_ms_per_step"] > 0 and m["compute_steps"] >= 3, m
            assert m["compute_seconds"] >= PROBE_SECONDS, m  # time-boxed like the probe
            assert abs(m["compute_ms_per_step"] * m["compute_steps"] - m["compute_seconds"] * 1000) < 1e-6 * 1000, m
    steps = run.steps
    assert sorted(steps) == [0, 1], run.explain()
    for m in metrics:
        records = steps[m["rank"]]
        first = m["steps_completed"] - len(records)  # 0, or the step a resumed run started from
        assert [r["step"] for r in records] == list(range(first, m["steps_completed"])), records
        assert all(r["ms"] > 0 and "nonfinite" not in r for r in records), records
        if training:
            assert_loss_falls_on_average([r["loss"] for r in records])
            assert (records[0]["loss"], records[-1]["loss"]) == (m["loss_first"], m["loss_last"])
    return metrics


def assert_loss_falls_on_average(losses: list[float]) -> None:
    """Finite, and the last third's mean below the first third's (single steps are noisy)."""
    assert all(math.isfinite(loss) for loss in losses), losses
    third = max(1, len(losses) // 3)
    assert sum(losses[-third:]) / third < sum(losses[:third]) / third, losses


def assert_harness_parses(run: Run, tmp_path: Path, workload: str) -> dict:
    """The log is understood by the harness's parser (`python -m harness.metrics`)."""
    log = tmp_path / f"{workload}.log"
    log.write_text(run.stdout)
    proc = run_python("-m", "harness.metrics", str(log), timeout=60)
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout)
    assert parsed["workload"] == workload
    assert sorted(r["rank"] for r in parsed["ranks"]) == [0, 1]
    return parsed


def assert_canned_gpu_logs_have_the_keys_of(metrics: list[dict], workload: str) -> None:
    """workloads/canned_gpu_logs.py writes the records of a real run of this workload: the same keys, plus the
    GPU-only probe_h2d_gbps and its spread (a CPU run measures no host-to-device copy)."""
    canned = sorted((REPO / "localcluster" / "emulation" / "canned_logs").glob(f"{workload}-p*-*-*.log"))
    assert canned, f"no canned GPU logs of {workload}"
    for path in canned:
        records = [json.loads(line.removeprefix("KT2T_METRICS ")) for line in path.read_text().splitlines()
                   if line.startswith("KT2T_METRICS ")]
        assert records and all(list(r) == list(records[0]) for r in records), path.name
        real = [*metrics[0]]
        at = real.index("probe_seconds")
        real[at:at] = [f"probe_h2d_gbps{suffix}" for suffix in ("", "_min", "_max", "_repeats")]
        assert list(records[0]) == real, (path.name, list(records[0]), real)
