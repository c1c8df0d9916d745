"""--bertTrainingImage configures TestBertTraining alone; in an image without the workloads package
(upstream's BERT image) the test runs the image's own `python train.py` under mpirun, as upstream's
test does, with no other setting; TRAINING_COMMAND still overrides. The rendered objects are checked,
and the pod's program is run with stand-in `python`s (with and without the package)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.manifests import render
from harness.config.settings import Config, resolve
from harness.framework.cli import parse_args
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.workload import Placement, Workload
from testbins.nvidia_training.bert import UPSTREAM_BERT_PROGRAM, bert_workload

UPSTREAM_IMAGE = "registry.example/aws-k8s-tester/nvidia-training:v1"


def config(*argv: str, **env: str) -> Config:
    return resolve(parse_args(list(argv)), env)


def rendered(cfg: Config, workload: Workload) -> list[dict]:
    """The workload's objects as launch() renders them (harness.jobs.job.placement_for's image)."""
    where = Placement(namespace="ns", labels={MANAGED_BY_LABEL: MANAGED_BY, "kubetest2-training/job": "j"},
                      pod_annotations={}, pod_env={}, node_type="p3.16xlarge", node_names=("n0", "n1"),
                      processes_per_node=8, efa_per_node=0, accelerator="nvidia", image=cfg.training_image,
                      job_timeout=600.0)
    launcher = LAUNCHERS[workload.launcher or cfg.launcher]
    return [obj for r in launcher.renderings(workload, where) for obj in render(r.template, r.fields)]


def images(objects: list[dict]) -> set[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "image" in node and "name" in node:
                found.add(node["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(objects)
    return found


def mpirun_command(objects: list[dict]) -> list[str]:
    (mpijob,) = [o for o in objects if o["kind"] == "MPIJob"]
    return mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]


def test_the_bert_image_is_bert_s_alone():
    cfg = config("--bertTrainingImage", UPSTREAM_IMAGE)
    assert images(rendered(cfg, bert_workload(cfg))) == {UPSTREAM_IMAGE}
    nanogpt = Workload("nanogpt-training", "workloads.nanogpt", ("--size", "small"))
    assert images(rendered(cfg, nanogpt)) == {cfg.training_image} != {UPSTREAM_IMAGE}
    assert bert_workload(config()).image is None  # without the flag: TRAINING_IMAGE, ours
    assert bert_workload(config()).program()[:3] == ["python", "-m", "workloads.bert"]


def test_upstreams_image_runs_under_mpirun_with_the_image_program_fallback():
    cfg = config("--bertTrainingImage", UPSTREAM_IMAGE)
    command = mpirun_command(rendered(cfg, bert_workload(cfg)))
    assert command[0] == "mpirun" and "--tag-output" in command
    program = command[command.index("sh"):]
    assert program[:2] == ["sh", "-c"] and program[3:] == ["bert-training", "--size", "base"]
    assert program[2].endswith(f"exec {UPSTREAM_BERT_PROGRAM}")
    # A LAUNCHER the user set is kept (torchrun runs ours; upstream's train.py needs mpirun's rank).
    torchrun = bert_workload(config("--bertTrainingImage", UPSTREAM_IMAGE, LAUNCHER="torchrun"))
    assert torchrun.launcher is None


def test_training_command_still_overrides():
    cfg = config("--bertTrainingImage", UPSTREAM_IMAGE, TRAINING_COMMAND="python train.py --epochs 1")
    workload = bert_workload(cfg)
    assert workload.program() == ["python", "train.py", "--epochs", "1"] and workload.image == UPSTREAM_IMAGE


def stand_in_python(folder: Path, has_workloads: bool) -> Path:
    """A `python` that records its arguments and answers the package check as the image would."""
    folder.mkdir()
    script = folder / "python"
    script.write_text("#!/bin/sh\n"
                      f'echo "$*" >> "{folder}/calls"\n'
                      f'case "$1" in -c) exit {0 if has_workloads else 1};; esac\n'
                      "exit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def run_program(folder: Path) -> tuple[list[str], str]:
    program = bert_workload(config("--bertTrainingImage", UPSTREAM_IMAGE)).program()
    done = subprocess.run(program, capture_output=True, text=True, check=True, timeout=30,
                          env={**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"})
    return (folder / "calls").read_text().splitlines(), done.stderr


def test_the_pod_program_runs_ours_when_the_image_has_the_package_else_train_py(tmp_path: Path):
    calls, stderr = run_program(stand_in_python(tmp_path / "ours", has_workloads=True))
    assert calls[-1] == "-m workloads.bert --size base" and stderr == ""
    calls, stderr = run_program(stand_in_python(tmp_path / "upstream", has_workloads=False))
    assert calls[0].startswith("-c import importlib.util")
    assert calls[-1] == "train.py"  # upstream's line: `python train.py`, no arguments
    assert "no workloads package" in stderr

