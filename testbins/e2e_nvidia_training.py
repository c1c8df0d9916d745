"""e2e-nvidia-training (also installed as nvidia-training.test): multi-node training suites, upstream
aws-k8s-tester's TestBertTraining (feature bert-training) among them."""

from __future__ import annotations

import re
import sys
import time

from harness.cluster.conditions import log_line_after, log_line_matches, pod_found, pods_ready
from harness.cluster.labels import JOB_LABEL, label_value
from harness.cluster.logs import Heading
from harness.cluster.resources import POD, Obj
from harness.config.settings import Config, Source
from harness.errors import JobFailed, TestFailure
from harness.framework.context import TestContext
from harness.framework.suite import GPU, Suite
from harness.jobs.assessment import assess
from harness.jobs.images import image
from harness.jobs.job import Job, launch
from harness.jobs.launchers.trainjob import CHECKPOINT_ROOT, RESTART_ATTEMPT_LABEL
from harness.jobs.workload import Workload
from harness.runner import main as run_suite

SUITE = Suite("e2e-nvidia-training", "Multi-node training on a Kubernetes cluster: each test launches a workload "
              "across the configured nodes (torchrun, MPI or a Kubeflow TrainJob), waits failing fast, and checks "
              "its metrics.",
              aliases=("nvidia-training.test",))

# Each workload's size names for WORKLOAD_SIZE tiny / base / large.
SIZES = {
    "bert": {"tiny": "tiny", "base": "base", "large": "large"},
    "nanogpt": {"tiny": "tiny", "base": "small", "large": "gpt2"},
    "mnist": {"tiny": "tiny", "base": "full", "large": "full"},
}


def workload_size(cfg: Config, workload: str) -> str:
    """WORKLOAD_SIZE, else tiny on CPU clusters and with -test.short, base (the upstream BERT shape)
    on GPUs."""
    size = cfg.workload_size or ("tiny" if cfg.accelerator == "cpu" or cfg.test_short else "base")
    return SIZES[workload][size]


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


@SUITE.test("TestBertTraining", upstream=True, feature="bert-training", labels=GPU,
            assessments=("BERT training Job succeeds",), marks_assessments=True)
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


def succeeded_and_assessed(t: TestContext, job: Job, workload: str) -> None:
    """The one assessment of a training test: the Job succeeds, then its metrics are judged."""
    job.wait_succeeded()
    assess(t, job, workload)


@SUITE.test("TestNanoGPTTraining", labels=GPU, assessments=("training succeeds",), marks_assessments=True)
def test_nanogpt_training(t: TestContext) -> None:
    """A GPT (nanoGPT-style) with DDP and gradient accumulation; MFU reported where the GPU is known."""
    # torch.compile pays off on GPUs (fused kernels, MFU); on CPU it only adds compile time.
    compile_flag = ("--compile",) if t.cfg.accelerator == "nvidia" else ()
    job = launch(t, Workload("nanogpt-training", "workloads.nanogpt",
                             ("--size", workload_size(t.cfg, "nanogpt"), *compile_flag)))
    t.assessment("training succeeds", lambda: succeeded_and_assessed(t, job, "nanogpt"))


@SUITE.test("TestMNISTTraining", labels=GPU, assessments=("training succeeds",), marks_assessments=True)
def test_mnist_training(t: TestContext) -> None:
    """The SMDDP MNIST CNN with Lightning's DDPStrategy (nccl on GPU, gloo on CPU)."""
    job = launch(t, Workload("mnist-training", "workloads.mnist", ("--size", workload_size(t.cfg, "mnist"))))
    t.assessment("training succeeds", lambda: succeeded_and_assessed(t, job, "mnist"))


CHECKPOINT_EVERY = 5
# Written by workloads.nanogpt on rank 0 after each checkpoint, and on resuming from one.
CHECKPOINT_LINE = re.compile(r"saved checkpoint at step (\d+)")
RESUMED_LINE = re.compile(r"resumed from step (\d+)")
# Every rank's line per training step (workloads/metric_lines.py).
STEP_LINE = re.compile(r"^KT2T_STEP ")
ELASTIC_LAUNCHERS = ("torchrun", "trainjob")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def elastic_checkpoint_dir(t: TestContext, job_name: str) -> str:
    """torchrun: the pod's own /tmp (the surviving worker keeps it; each restart is in place);
    trainjob: JobSet recreates every pod, so a folder of the node's (a hostPath), one per run."""
    if t.cfg.launcher == "trainjob":
        return f"{CHECKPOINT_ROOT}/{label_value(t.cfg.run_id)}-{job_name}"
    return f"/tmp/kubetest2-training-checkpoints/{job_name}"


def index_of(pod: Obj) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)


@SUITE.test("TestElasticRecovery", labels=GPU, assessments=("training resumes",), marks_assessments=True)
def test_elastic_recovery(t: TestContext) -> None:
    """A worker pod is deleted mid-training; the job resumes from its checkpoint: torchrun's c10d
    rendezvous restarts the ranks in place (LAUNCHER=torchrun), JobSet's failure policy recreates
    the TrainJob's pods (LAUNCHER=trainjob). elastic.recovery_seconds: from the deletion to the first
    step after "resumed from step N" in rank 0's log."""
    if t.cfg.launcher not in ELASTIC_LAUNCHERS:
        t.skip(f"elastic recovery is torchrun's (c10d rendezvous, restarts) and trainjob's (JobSet restarts), "
               f"both from a checkpoint; LAUNCHER={t.cfg.launcher}: an MPIJob's mpirun ends when it loses a rank, "
               "and fails the test")
    if t.topology.node_count < 2:
        t.skip("elastic recovery needs at least 2 nodes (a surviving worker hosts the rendezvous)")
    size = workload_size(t.cfg, "nanogpt")
    name = "nanogpt-elastic"
    workload = Workload(
        name, "workloads.nanogpt",
        ("--size", size, "--checkpoint-dir", elastic_checkpoint_dir(t, name),
         "--checkpoint-every", str(CHECKPOINT_EVERY), "--max-iters", str(8 * CHECKPOINT_EVERY)),
        elastic=True, max_restarts=3, launcher=t.cfg.launcher)
    job = launch(t, workload)
    t.assessment("training resumes", lambda: delete_a_worker_and_resume(t, job))


def delete_a_worker_and_resume(t: TestContext, job: Job) -> None:
    """The assessment: a worker deleted once rank 0 wrote a checkpoint, the job resumes from it."""
    job.wait(pods_ready(job.namespace, job.selector, job.node_count))
    # Mid-training: after rank 0 wrote a checkpoint, delete the last worker pod.
    worker0 = next(p for p in job.pods() if index_of(p) == "0")
    line = job.wait(log_line_matches(job.namespace, worker0["metadata"]["name"], CHECKPOINT_LINE))
    victim = max(job.pods(), key=lambda p: int(index_of(p) or 0))
    t.logf("%s; deleting pod %s on node %s", line.strip(), victim["metadata"]["name"],
           victim["spec"].get("nodeName"))
    t.cluster.delete(POD, victim["metadata"]["name"], job.namespace)
    deleted_at = time.monotonic()
    t.property("elastic.deleted_pod", victim["metadata"]["name"])
    record_recovery(t, job, worker0, deleted_at)
    job.wait_succeeded()
    metrics = assess(t, job, "nanogpt")
    resumed = [r.values.get("resumed_from_step") for r in metrics.ranks]
    # torchrun counts its in-place restarts (TORCHELASTIC_RESTART_COUNT); JobSet's recreated pods
    # start at 0 and carry the set's restart attempt instead (jobset.restarts, from the pods).
    restarts = (int(t.junit_case.properties.get("jobset.restarts", 0)) if t.cfg.launcher == "trainjob"
                else max(int(r.values.get("restart_count") or 0) for r in metrics.ranks))
    t.property("elastic.restart_count", restarts)
    t.property("elastic.resumed_from_step", max((s for s in resumed if s is not None), default="none"))
    if restarts < 1 or not any(resumed):
        raise TestFailure(f"elastic: the job finished without resuming from a checkpoint (restart count "
                          f"{restarts}, resumed_from_step {resumed}); expected a restart that resumes "
                          f"from step >= {CHECKPOINT_EVERY}")


def record_recovery(t: TestContext, job: Job, worker0: Obj, deleted_at: float) -> None:
    """elastic.recovery_seconds: the deletion to rank 0's first step after it resumed. Rank 0 is
    the index-0 pod's: the same pod under torchrun, its successor after a JobSet restart."""
    pod = worker0["metadata"]["name"]
    if t.cfg.launcher == "trainjob":
        # JobSet recreates the pods; the new index-0 pod runs rank 0.
        def restarted_rank0(candidate: Obj) -> bool:
            meta = candidate["metadata"]
            return (index_of(candidate) == "0" and (meta.get("labels") or {}).get(RESTART_ATTEMPT_LABEL, "0") != "0"
                    and (meta.get("labels") or {}).get(JOB_LABEL) == label_value(job.workload.job_name)
                    and not meta.get("deletionTimestamp")
                    and candidate.get("status", {}).get("phase") == "Running")

        pod = job.wait(pod_found(job.namespace, job.selector, restarted_rank0,
                                 "rank 0's pod of the restarted JobSet to run"))
    try:
        line = job.wait(log_line_after(job.namespace, pod, RESUMED_LINE, STEP_LINE))
    except JobFailed as exc:
        if not str(exc).startswith(f"the log of {pod} ended"):
            raise
        # torchrun's rendezvous may give rank 0 to another pod after the restart: not measured then.
        t.logf("elastic.recovery_seconds not measured: %s", exc)
        return
    seconds = time.monotonic() - deleted_at
    t.property("elastic.recovery_seconds", f"{seconds:.2f}")
    t.logf("first step after the resume %.1fs after the deletion (pod %s): %s", seconds, pod, line.strip()[:120])


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
