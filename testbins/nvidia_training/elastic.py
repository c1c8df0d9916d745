"""TestElasticRecovery (this project's): a worker deleted mid-training, the job resumes from its checkpoint."""

from __future__ import annotations

import re
import time

from harness.cluster.conditions import log_line_after, log_line_matches, pod_found, pods_ready
from harness.cluster.labels import JOB_LABEL, label_value
from harness.cluster.resources import POD, Obj
from harness.errors import JobFailed, TestFailure
from harness.framework.context import TestContext
from harness.jobs.assessment import assess
from harness.jobs.job import Job, launch
from harness.jobs.launchers.base import worker_index
from harness.jobs.launchers.trainjob import CHECKPOINT_ROOT, RESTART_ATTEMPT_LABEL
from harness.jobs.workload import Workload
from testbins.nvidia_training.common import workload_size

CHECKPOINT_EVERY = 5
# Steps of the elastic run: enough that the deletion lands mid-training. On the local cluster's real
# nodes 11 s passed from rank 0's first checkpoint line to the kubelet killing the deleted pod
# (events.txt of a LAUNCHER=dlrover run), while 40 steps of the tiny size took 1 s: the ranks had
# finished, and the relaunched worker waited for a rendezvous nobody joined. 1,000 tiny steps on
# CPU take about 25 s.
ELASTIC_STEPS = 1000
# Written by workloads.nanogpt on rank 0 after each checkpoint, and on resuming from one.
CHECKPOINT_LINE = re.compile(r"saved checkpoint at step (\d+)")
RESUMED_LINE = re.compile(r"resumed from step (\d+)")
# Every rank's line per training step (workloads/metric_lines.py).
STEP_LINE = re.compile(r"^KT2T_STEP ")
ELASTIC_LAUNCHERS = ("torchrun", "trainjob", "dlrover")
# The launchers whose lost worker comes back as a new pod, which must find the checkpoint on its node.
NEW_POD_LAUNCHERS = ("trainjob", "dlrover")


def elastic_checkpoint_dir(t: TestContext, job_name: str) -> str:
    """torchrun: the pod's own /tmp (the surviving worker keeps it; each restart is in place);
    trainjob and dlrover: the lost worker comes back as a new pod (JobSet recreates every pod,
    DLRover's master relaunches the lost one), so a folder of the node's (a hostPath), one per run."""
    if t.cfg.launcher in NEW_POD_LAUNCHERS:
        return f"{CHECKPOINT_ROOT}/{label_value(t.cfg.run_id)}-{job_name}"
    return f"/tmp/kubetest2-training-checkpoints/{job_name}"


def test_elastic_recovery(t: TestContext) -> None:
    """A worker pod is deleted mid-training; the job resumes from its checkpoint: torchrun's c10d
    rendezvous restarts the ranks in place (LAUNCHER=torchrun), JobSet's failure policy recreates
    the TrainJob's pods (LAUNCHER=trainjob), DLRover's master relaunches the lost worker and the
    agents restart their ranks (LAUNCHER=dlrover). elastic.recovery_seconds: from the deletion to the first
    step after "resumed from step N" in rank 0's log."""
    if t.cfg.launcher not in ELASTIC_LAUNCHERS:
        t.skip(f"elastic recovery is torchrun's (c10d rendezvous, restarts), trainjob's (JobSet restarts) and "
               f"dlrover's (the master relaunches the worker), all from a checkpoint; LAUNCHER={t.cfg.launcher}: "
               "an MPIJob's mpirun ends when it loses a rank, and fails the test")
    if t.topology.node_count < 2:
        t.skip("elastic recovery needs at least 2 nodes (a surviving worker hosts the rendezvous)")
    size = workload_size(t.cfg, "nanogpt")
    name = "nanogpt-elastic"
    workload = Workload(
        name, "workloads.nanogpt",
        ("--size", size, "--checkpoint-dir", elastic_checkpoint_dir(t, name),
         "--checkpoint-every", str(CHECKPOINT_EVERY), "--max-iters", str(ELASTIC_STEPS)),
        elastic=True, max_restarts=3, launcher=t.cfg.launcher)
    job = launch(t, workload)
    t.assessment("training resumes", lambda: delete_a_worker_and_resume(t, job))


def delete_a_worker_and_resume(t: TestContext, job: Job) -> None:
    """The assessment: a worker deleted once rank 0 wrote a checkpoint, the job resumes from it."""
    job.wait(pods_ready(job.namespace, job.worker_selector, job.node_count))
    # Mid-training: after rank 0 wrote a checkpoint, delete the last worker pod (of the pods that
    # run ranks: not a DLRover master).
    workers = [p for p in job.pods() if worker_index(p) is not None]
    worker0 = next(p for p in workers if worker_index(p) == 0)
    line = job.wait(log_line_matches(job.namespace, worker0["metadata"]["name"], CHECKPOINT_LINE))
    victim = max(workers, key=lambda p: worker_index(p) or 0)
    t.logf("%s; deleting pod %s on node %s", line.strip(), victim["metadata"]["name"],
           victim["spec"].get("nodeName"))
    t.cluster.delete(POD, victim["metadata"]["name"], job.namespace)
    deleted_at = time.monotonic()
    t.property("elastic.deleted_pod", victim["metadata"]["name"])
    saved = CHECKPOINT_LINE.search(line)
    record_recovery(t, job, worker0, deleted_at, int(saved.group(1)) if saved else 0)
    job.wait_succeeded()
    metrics = assess(t, job, "nanogpt")
    resumed = [r.values.get("resumed_from_step") for r in metrics.ranks]
    # torchrun's and DLRover's agents count their in-place restarts (TORCHELASTIC_RESTART_COUNT: a
    # surviving DLRover worker's agent restarts its ranks when the relaunched one joins); JobSet's
    # recreated pods start at 0 and carry the set's restart attempt instead (jobset.restarts).
    restarts = (int(t.junit_case.properties.get("jobset.restarts", 0)) if t.cfg.launcher == "trainjob"
                else max(int(r.values.get("restart_count") or 0) for r in metrics.ranks))
    t.property("elastic.restart_count", restarts)
    t.property("elastic.resumed_from_step", max((s for s in resumed if s is not None), default="none"))
    if restarts < 1 or not any(resumed):
        raise TestFailure(f"elastic: the job finished without resuming from a checkpoint (restart count "
                          f"{restarts}, resumed_from_step {resumed}); expected a restart that resumes "
                          f"from step >= {CHECKPOINT_EVERY}")


def record_recovery(t: TestContext, job: Job, worker0: Obj, deleted_at: float, saved_step: int) -> None:
    """elastic.recovery_seconds: the deletion to rank 0's first step after it resumed from a step at
    least `saved_step` (the checkpoint seen before the deletion; an earlier restart's resume, its
    own recovery, does not count). Rank 0 is the index-0 pod's: the same pod under torchrun and
    DLRover (the deleted worker is the last one), its successor after a JobSet restart."""
    pod = worker0["metadata"]["name"]
    if t.cfg.launcher == "trainjob":
        # JobSet recreates the pods; the new index-0 pod runs rank 0.
        def restarted_rank0(candidate: Obj) -> bool:
            meta = candidate["metadata"]
            return (worker_index(candidate) == 0 and (meta.get("labels") or {}).get(RESTART_ATTEMPT_LABEL, "0") != "0"
                    and (meta.get("labels") or {}).get(JOB_LABEL) == label_value(job.workload.job_name)
                    and not meta.get("deletionTimestamp")
                    and candidate.get("status", {}).get("phase") == "Running")

        pod = job.wait(pod_found(job.namespace, job.selector, restarted_rank0,
                                 "rank 0's pod of the restarted JobSet to run"))
    try:
        line = job.wait(log_line_after(job.namespace, pod, RESUMED_LINE, STEP_LINE,
                                       first_accepted=lambda resumed: int(resumed.group(1)) >= saved_step))
    except JobFailed as exc:
        if not str(exc).startswith(f"the log of {pod} ended"):
            raise
        # torchrun's rendezvous may give rank 0 to another pod after the restart: not measured then.
        t.logf("elastic.recovery_seconds not measured: %s", exc)
        return
    seconds = time.monotonic() - deleted_at
    t.property("elastic.recovery_seconds", f"{seconds:.2f}")
    t.logf("first step after the resume %.1fs after the deletion (pod %s): %s", seconds, pod, line.strip()[:120])
