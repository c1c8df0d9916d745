"""TestBertTraining (upstream's bert_training_test.go): ours, or the image --bertTrainingImage names."""

from __future__ import annotations

from harness.cluster.logs import Heading
from harness.config.settings import Config, Source
from harness.framework.context import TestContext
from harness.jobs.images import image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from testbins.nvidia_training.common import succeeded_and_assessed, workload_size

# Upstream's BERT image (aws-k8s-tester test/images/nvidia-training) runs `python train.py` in its
# WORKDIR /app on every rank, under mpirun (its rank comes from OMPI_COMM_WORLD_*).
UPSTREAM_BERT_PROGRAM = "python train.py"
# An image given by --bertTrainingImage runs ours when it has the workloads package, else its own
# program as upstream's test does. find_spec imports only the package's __init__, not torch.
BERT_IMAGE_PROGRAM = (
    'if python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec(\'workloads.bert\') is None)" '
    '2>/dev/null; then exec python -m workloads.bert "$@"; fi; '
    f'echo "bert-training: the image has no workloads package: running its own {UPSTREAM_BERT_PROGRAM} '
    f'(upstream\'s BERT)" >&2; exec {UPSTREAM_BERT_PROGRAM}'
)


def bert_workload(cfg: Config) -> Workload:
    """Ours (`python -m workloads.bert`) in TRAINING_IMAGE; in the image --bertTrainingImage names,
    ours when the image has the workloads package, else the image's own program as upstream's test
    runs it (`python train.py` under mpirun: the mpi launcher unless LAUNCHER was set); the command
    TRAINING_COMMAND gives overrides both (whose log format the metrics parser reads)."""
    image = cfg.bert_training_image  # None: TRAINING_IMAGE
    if cfg.training_command:
        program, *args = cfg.training_command
        return Workload("bert-training", binary=program, args=tuple(args), image=image)
    ours = ("--size", workload_size(cfg, "bert"))
    if image is None:
        return Workload("bert-training", "workloads.bert", ours)
    launcher = "mpi" if cfg.origin("launcher").source is Source.DEFAULT else None
    return Workload("bert-training", binary="sh", args=("-c", BERT_IMAGE_PROGRAM, "bert-training", *ours),
                    image=image, launcher=launcher)


def test_bert_training(t: TestContext) -> None:
    """BERT pretraining (MLM + NSP) across every node and GPU; throughput checked per rank and against
    the node type's minimum."""
    # upstream's flag first: unset, upstream's test fails at once naming it; ours then runs TRAINING_IMAGE's
    if t.cfg.bert_training_image is None:
        image(t, "training_image", needed_for=f"{t.name} (--bertTrainingImage unset)")
    else:
        image(t, "bert_training_image")
    job = launch(t, bert_workload(t.cfg), Heading.LOGS_FROM_POD)
    t.assessment("BERT training Job succeeds", lambda: succeeded_and_assessed(t, job, "bert"))
