"""Rank discovery: the OpenMPI path, and launcher-variable errors as one line with exit code 2."""

from __future__ import annotations

import math
import subprocess

import pytest
from workload_runs import assert_trained, run_python

pytest.importorskip("torch")

pytestmark = pytest.mark.workloads

WORKLOADS = ("bert", "nanogpt", "mnist", "allreduce")


@pytest.mark.timeout(240)
def test_openmpi_variables_give_the_ranks(mpi_ranks):
    run = mpi_ranks("nanogpt", "--size", "tiny", "--max-iters", "30")
    metrics = assert_trained(run, "nanogpt", math.log(65), tolerance=0.1)
    assert {m["launcher"] for m in metrics} == {"openmpi"}


@pytest.mark.timeout(240)
def test_openmpi_variables_reach_lightning(mpi_ranks):
    run = mpi_ranks("mnist", "--size", "tiny")
    metrics = assert_trained(run, "mnist", math.log(10), tolerance=0.15)
    assert {m["launcher"] for m in metrics} == {"openmpi"}


def run_module(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_python("-m", f"workloads.{name}", *args, env=env, timeout=120)


@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    ("workload", "env", "named"),
    [
        # upstream's failure mode was `KeyError: 'NUM_GPUS_PER_NODE'` with a traceback
        ("bert", {"NUM_GPUS_PER_NODE": "eight"}, "NUM_GPUS_PER_NODE='eight' is not an integer"),
        ("nanogpt", {"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK is not set"),
        (
            "allreduce",
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
            "MASTER_ADDR is not set",
        ),
        (
            "allreduce",
            {"RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
            "RANK=3 must be below WORLD_SIZE=2",
        ),
        ("allreduce", {"NCCL_TESTS_MIN_BW": "fast"}, "NCCL_TESTS_MIN_BW='fast' is not a number (GB/s)"),
    ],
)
def test_bad_launcher_variable_is_one_line_exit_2(workload, env, named):
    proc = run_module(workload, "--size", "tiny", env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"workloads.{workload}: {named}"
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(150)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_help(workload):
    proc = run_module(workload, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"python -m workloads.{workload}" in proc.stdout
    assert "--size" in proc.stdout
