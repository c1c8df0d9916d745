"""Fixtures that launch the workloads for real (torchrun or hand-set OpenMPI variables) on CPU."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping

import pytest
from workload_runs import REPO, TORCHRUN, Run, clean_env, free_port, run_python


@pytest.fixture
def torchrun() -> Callable[..., Run]:
    """torchrun --standalone --nproc_per_node=2 -m workloads.<name> ARGS, output captured."""

    def launch(
        name: str,
        *args: str,
        torchrun_args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 150,
    ) -> Run:
        proc = run_python(*TORCHRUN, *torchrun_args, "-m", f"workloads.{name}", *args, env=env, timeout=timeout)
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return launch


@pytest.fixture
def mpi_ranks() -> Callable[..., Run]:
    """Start 2 processes with the OMPI_COMM_WORLD_* variables mpirun would set, as mpirun would."""

    def launch(name: str, *args: str, timeout: float = 150) -> Run:
        port = str(free_port())
        procs = []
        for rank in range(2):
            env = clean_env(
                {
                    "OMPI_COMM_WORLD_RANK": str(rank),
                    "OMPI_COMM_WORLD_SIZE": "2",
                    "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "OMP_NUM_THREADS": "1",  # two ranks on a 2-core machine
                }
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", f"workloads.{name}", *args],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outs = []
        try:
            outs = [p.communicate(timeout=timeout) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        return Run(
            max(abs(p.returncode or 0) for p in procs),
            "".join(o for o, _ in outs),
            "".join(e for _, e in outs),
        )

    return launch
