"""MPI ranks get the workloads image's environment on purpose: every ENV of workloads/Dockerfile is
forwarded with mpirun's -x (or is mpirun's own switch, read by the launcher), so nothing reaches a
rank by accident of its working folder."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.cluster.manifests import render
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.launchers.mpi import (
    AWS_OFI_NCCL_LIB_DIR,
    AWS_OFI_NCCL_TUNER,
    MPIRUN_IMAGE_VARIABLES,
    MPIRUN_LAUNCHER_ONLY,
)
from harness.jobs.workload import Placement, Workload

DOCKERFILE = Path(__file__).resolve().parents[4] / "workloads" / "Dockerfile"


def dockerfile_env_names(text: str) -> set[str]:
    """The names every ENV instruction sets (`ENV A=1 \\` continued lines, and `ENV A 1`)."""
    names: set[str] = set()
    logical, lines = "", []
    for line in text.splitlines():
        logical += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            lines.append(logical.strip())
            logical = ""
    for line in lines:
        if not line.upper().startswith("ENV "):
            continue
        words = shlex.split(line[4:])
        if words and "=" not in words[0]:
            names.add(words[0])  # the legacy `ENV NAME value` form
        else:
            names.update(word.split("=", 1)[0] for word in words)
    return names


def test_the_parser_reads_both_forms_and_continued_lines():
    text = 'FROM x\nENV A=1 \\\n    B="two words" \\\n    C=3\nRUN echo ENV D=4\nENV E 5 6\n'
    assert dockerfile_env_names(text) == {"A", "B", "C", "E"}


def test_every_env_of_the_workloads_image_is_forwarded_or_mpiruns_own():
    names = dockerfile_env_names(DOCKERFILE.read_text())
    assert {"PATH", "PYTHONPATH", "LD_PRELOAD", "VIRTUAL_ENV"} <= names  # the parse found them
    assert names <= set(MPIRUN_IMAGE_VARIABLES) | set(MPIRUN_LAUNCHER_ONLY), \
        f"ENV of workloads/Dockerfile not forwarded to MPI ranks: {sorted(names - set(MPIRUN_IMAGE_VARIABLES))}"
    assert not set(MPIRUN_IMAGE_VARIABLES) & set(MPIRUN_LAUNCHER_ONLY)


def test_the_rendered_mpirun_forwards_them():
    where = Placement(namespace="ns", labels={"app.kubernetes.io/managed-by": "kubetest2-training"},
                      pod_annotations={}, pod_env={}, node_type="p5.48xlarge", node_names=("n0", "n1"),
                      processes_per_node=8, efa_per_node=0, accelerator="nvidia", image="i:1", job_timeout=60.0)
    (mpijob,) = [obj for r in LAUNCHERS["mpi"].renderings(Workload("j", "workloads.bert"), where)
                 for obj in render(r.template, r.fields)]
    command = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    forwarded = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
    assert set(MPIRUN_IMAGE_VARIABLES) <= forwarded
    assert not set(MPIRUN_LAUNCHER_ONLY) & forwarded


def test_the_image_installs_aws_ofi_nccl_where_the_launcher_points_nccl():
    """Issue 43 item 4: the EFA build of the workloads image puts aws-ofi-nccl's net plugin and tuner
    where NCCL_TUNER_PLUGIN (the MPI launcher's default on EFA nodes) and LD_LIBRARY_PATH point, and
    its build fails when they are not there."""
    text = DOCKERFILE.read_text()
    assert f"--libdir={AWS_OFI_NCCL_LIB_DIR} " in text
    assert "for lib in libnccl-net-ofi.so libnccl-ofi-tuner.so; do" in text
    assert f'test -e "{AWS_OFI_NCCL_LIB_DIR}/$lib"' in text
    assert f"{AWS_OFI_NCCL_LIB_DIR}/libnccl-ofi-tuner.so" == AWS_OFI_NCCL_TUNER
    ld_library_path = next(line.split("=", 1)[1].split()[0] for line in text.splitlines()
                           if line.strip().startswith("LD_LIBRARY_PATH="))
    assert AWS_OFI_NCCL_LIB_DIR in ld_library_path.split(":"), ld_library_path
    assert "/opt/aws-ofi-nccl" not in text  # the old, second location
