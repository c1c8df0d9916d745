"""LAUNCHER=trainjob without a cluster: the TrainJob (and the elastic test's TrainingRuntime) rendered
from a Workload and a Placement, what fails it (conditions on canned TrainJob, JobSet and Event
objects), which failed pods JobSet restarts, where ranks ran after a restart, and the set-up's
choices (install Trainer and JobSet, the runtime, wait for the webhook) against a fake cluster.
The real controllers run in tests/integration/suites/test_trainjob_launcher.py."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from harness.cluster.conditions import (
    jobset_failed,
    log_line_after,
    suspended,
    trainjob_failed,
    trainjob_succeeded,
    warning_event,
)
from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.manifests import render
from harness.cluster.resources import CLUSTER_TRAINING_RUNTIME, TRAINJOB, Resource
from harness.cluster.watch import LOG_END, LOG_LINE, ClusterState
from harness.config.settings import resolve
from harness.errors import ClusterError, ConfigError, JobFailed, WaitTimeout
from harness.jobs.launchers import LAUNCHERS, rank_locations
from harness.jobs.launchers.trainjob import CHECKPOINT_ROOT, RESTARTS_ANNOTATION
from harness.jobs.workload import Placement, Workload
from harness.setup import trainer as trainer_setup

LABELS = {MANAGED_BY_LABEL: MANAGED_BY, "kubetest2-training/job": "mnist-training"}
LAUNCHER = LAUNCHERS["trainjob"]


def placement(accelerator: str = "cpu", per_node: int = 1, runtime: str = "torch-distributed") -> Placement:
    return Placement(namespace="ns", labels=LABELS, pod_annotations={"a": "b"}, pod_env={"NCCL_DEBUG": "WARN"},
                     node_type="kwok-cpu", node_names=("n0", "n1"), processes_per_node=per_node, efa_per_node=0,
                     accelerator=accelerator, image="repo/train:1", job_timeout=600.0, trainjob_runtime=runtime)


def rendered(workload: Workload, where: Placement) -> list[dict[str, Any]]:
    return [obj for r in LAUNCHER.renderings(workload, where) for obj in render(r.template, r.fields)]


def test_a_trainjob_runs_torchrun_on_the_clusters_runtime_with_the_placements_nodes_processes_and_env():
    mnist = Workload("mnist-training", "workloads.mnist", ("--size", "tiny"))
    (trainjob,) = rendered(mnist, placement("nvidia", per_node=8, runtime="torch-cuda"))
    assert trainjob["kind"] == "TrainJob"
    spec = trainjob["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-cuda"}
    trainer = spec["trainer"]
    # torchrun takes nodes, processes, rank and rendezvous from Trainer's PET_* variables.
    assert trainer["command"] == ["torchrun"] and trainer["args"] == ["-m", "workloads.mnist", "--size", "tiny"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}, "requests": {"nvidia.com/gpu": 8}}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer["env"]}
    assert env["NCCL_DEBUG"] == "WARN" and env["NUM_GPUS_PER_NODE"] == "8" and env["ACCELERATOR"] == "nvidia"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Trainer's webhook refuses reserved names, and torchrun sets the ranks' MASTER_*.
    assert not [name for name in env if name.startswith(("PET_", "MASTER_"))]
    (override,) = spec["podTemplateOverrides"]
    assert override["metadata"]["annotations"] == {"a": "b"}
    assert override["spec"]["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert spec["labels"] == LABELS


def test_a_binary_runs_under_torchrun_without_python():
    sweep = Workload("nccl-allreduce", binary="/opt/all_reduce_perf", args=("-b", "8"))
    (trainjob,) = rendered(sweep, placement())
    assert trainjob["spec"]["trainer"]["args"] == ["--no-python", "/opt/all_reduce_perf", "-b", "8"]


def test_the_elastic_trainjob_has_its_own_runtime_restarting_the_jobset_and_a_checkpoint_folder_on_the_node():
    elastic = Workload("nanogpt-elastic", "workloads.nanogpt", ("--checkpoint-dir", f"{CHECKPOINT_ROOT}/r-x"),
                       elastic=True, max_restarts=3, launcher="trainjob")
    runtime, trainjob = rendered(elastic, placement())
    assert (runtime["kind"], runtime["metadata"]["name"], runtime["metadata"]["namespace"]) == (
        "TrainingRuntime", "nanogpt-elastic", "ns")
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": 3}
    (node,) = jobset["replicatedJobs"]
    assert node["name"] == "node" and node["template"]["spec"]["backoffLimit"] == 0
    assert node["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert runtime["spec"]["mlPolicy"]["torch"] == {"numProcPerNode": "auto"}
    assert runtime["metadata"]["labels"] == LABELS  # deleted with the test's objects
    assert trainjob["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert trainjob["spec"]["runtimeRef"]["name"] == "nanogpt-elastic"
    (override,) = trainjob["spec"]["podTemplateOverrides"]
    assert override["metadata"]["annotations"] == {"a": "b", RESTARTS_ANNOTATION: "3"}
    volumes = {v["name"]: v for v in override["spec"]["volumes"]}
    assert volumes["checkpoints"]["hostPath"] == {"path": CHECKPOINT_ROOT, "type": "DirectoryOrCreate"}
    mounts = override["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "checkpoints", "mountPath": CHECKPOINT_ROOT} in mounts


def pod(name: str, index: int, created: str, phase: str = "Running", attempt: int = 0,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"jobset.sigs.k8s.io/restart-attempt": str(attempt)},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index),
                                         **(annotations or {})}},
            "spec": {"nodeName": f"n{index}"}, "status": {"phase": phase}}


def test_failed_pods_of_an_elastic_trainjob_are_jobsets_to_restart_and_restarts_are_counted():
    elastic = pod("e-node-0-1-a", 1, "2026-01-01T00:00:00Z", "Failed", annotations={RESTARTS_ANNOTATION: "3"})
    plain = pod("p-node-0-1-a", 1, "2026-01-01T00:00:00Z", "Failed")
    assert LAUNCHER.retried(elastic) and not LAUNCHER.retried(plain)
    pods = [pod("e-node-0-0-a", 0, "2026-01-01T00:00:00Z"), pod("e-node-0-0-b", 0, "2026-01-01T00:01:00Z", attempt=1)]
    assert LAUNCHER.run_counts(pods) == {"jobset.restarts": 1}
    assert LAUNCHER.run_counts([]) == {"jobset.restarts": 0}


def test_ranks_are_placed_on_the_newest_pod_of_each_index_after_a_restart():
    old = pod("e-node-0-1-a", 1, "2026-01-01T00:00:00Z", "Failed")
    new = pod("e-node-0-1-b", 1, "2026-01-01T00:01:00Z", attempt=1)
    zero = pod("e-node-0-0-b", 0, "2026-01-01T00:01:00Z", attempt=1)
    for order in ([old, new, zero], [new, old, zero]):
        assert rank_locations(order, 2) == {0: ("e-node-0-0-b", "n0"), 1: ("e-node-0-0-b", "n0"),
                                            2: ("e-node-0-1-b", "n1"), 3: ("e-node-0-1-b", "n1")}


def owner(kind: str, *conditions: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "tj", "namespace": "ns"}, "status": {"conditions": list(conditions)}}


def one(kind: str, obj: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    state.replace_all(kind, [obj])
    return state


def test_trainjob_and_jobset_conditions_name_their_reason():
    complete = owner("TrainJob", {"type": "Complete", "status": "True", "reason": "JobsCompleted"})
    assert trainjob_succeeded("ns", "tj").check(one("TrainJob", complete), 0) == "trainjob tj succeeded"
    failed = owner("TrainJob", {"type": "Failed", "status": "True", "reason": "FailedJobs",
                                "message": "jobset failed due to reaching max number of restarts"})
    assert trainjob_failed("ns", "tj").check(one("TrainJob", failed), 0) == (
        "trainjob tj failed: FailedJobs: jobset failed due to reaching max number of restarts")
    assert trainjob_failed("ns", "tj").check(one("TrainJob", complete), 0) is None
    jobset = owner("JobSet", {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "m"})
    assert jobset_failed("ns", "tj").check(one("JobSet", jobset), 0) == "jobset tj failed: ReachedMaxRestarts: m"
    paused = owner("TrainJob", {"type": "Suspended", "status": "True", "reason": "Suspended",
                                "message": "TrainJob is suspended"})
    assert suspended(TRAINJOB, "ns", "tj").check(one("TrainJob", paused), 0) == (
        "trainjob tj is suspended (Suspended: TrainJob is suspended): nothing runs until it is resumed")
    resumed = owner("TrainJob", {"type": "Suspended", "status": "False", "reason": "Resumed"})
    assert suspended(TRAINJOB, "ns", "tj").check(one("TrainJob", resumed), 0) is None


def event(kind: str, reason: str, message: str, type_: str = "Warning") -> dict[str, Any]:
    return {"metadata": {"name": "e1", "namespace": "ns"}, "type": type_, "reason": reason, "message": message,
            "involvedObject": {"kind": kind, "name": "tj"}}


def test_a_warning_event_fails_only_with_its_reason_and_message():
    gone = re.compile(r"not found ClusterTrainingRuntime")
    cond = warning_event("ns", "TrainJob", "tj", ("TrainJobResourcesCreationFailed",), gone)
    message = ("TrainJob resources reconciliation failed: not found ClusterTrainingRuntime specified in TrainJob: "
               'clustertrainingruntimes.trainer.kubeflow.org "torch-distributed" not found')
    assert cond.check(one("Event", event("TrainJob", "TrainJobResourcesCreationFailed", message)), 0) == (
        f"TrainJob tj: TrainJobResourcesCreationFailed: {message}")
    conflict = "TrainJob resources reconciliation failed: the object has been modified"
    assert cond.check(one("Event", event("TrainJob", "TrainJobResourcesCreationFailed", conflict)), 0) is None
    normal = event("TrainJob", "TrainJobResourcesCreationFailed", message, type_="Normal")
    assert cond.check(one("Event", normal), 0) is None
    jobset = warning_event("ns", "JobSet", "tj", ("JobCreationFailed",))
    assert jobset.check(one("Event", event("JobSet", "JobCreationFailed", "admission denied")), 0)
    assert jobset.check(one("Event", event("TrainJob", "JobCreationFailed", "other kind")), 0) is None


def test_the_first_step_after_the_resume_line():
    cond = log_line_after("ns", "p", re.compile(r"resumed from step (\d+)"), re.compile(r"^KT2T_STEP "))
    (followed,) = cond.watches
    state = ClusterState()
    state.apply((LOG_LINE, followed, 'KT2T_STEP {"step": 3}'))  # before the restart: not it
    assert cond.check(state, 0) is None
    state.apply((LOG_LINE, followed, "resumed from step 5"))
    assert cond.check(state, 0) is None
    state.apply((LOG_LINE, followed, 'KT2T_STEP {"step": 5}'))
    assert cond.check(state, 0) == 'KT2T_STEP {"step": 5}'
    ended = ClusterState()
    ended.apply((LOG_END, followed, None))
    with pytest.raises(JobFailed, match="the log of p ended without a line matching"):
        cond.check(ended, 0)


def test_an_earlier_restarts_resume_is_not_the_recovery_from_the_deletion():
    # Seen on the real nodes (LAUNCHER=dlrover): a rank restarted at step 5 for another reason, then
    # the worker was deleted after the checkpoint of step 10; only the resume from >= 10 is measured.
    cond = log_line_after("ns", "p", re.compile(r"resumed from step (\d+)"), re.compile(r"^KT2T_STEP "),
                          first_accepted=lambda match: int(match.group(1)) >= 10)
    (followed,) = cond.watches
    state = ClusterState()
    for line in ("resumed from step 5", 'KT2T_STEP {"step": 5}', "resumed from step 10"):
        state.apply((LOG_LINE, followed, line))
    assert cond.check(state, 0) is None
    state.apply((LOG_LINE, followed, 'KT2T_STEP {"step": 10}'))
    assert cond.check(state, 0) == 'KT2T_STEP {"step": 10}'


def test_failure_conditions_of_an_elastic_trainjob_leave_its_jobs_to_jobset():
    plain = Workload("mnist-training", "workloads.mnist")
    elastic = Workload("nanogpt-elastic", "workloads.nanogpt", elastic=True, max_restarts=3)
    names = [c.name for c in LAUNCHER.failed(plain, placement())]
    assert "job mnist-training-node-0 to fail" in names
    assert "trainjob mnist-training to fail" in names and "jobset mnist-training to fail" in names
    assert not [n for n in (c.name for c in LAUNCHER.failed(elastic, placement())) if n.startswith("job ")]


# -- set-up: Trainer, JobSet, the runtime, the webhook --------------------------------------------

class FakeCluster:
    """Serves the TrainJob API or not, has the runtime or not; dry-run applies answer as scripted."""

    def __init__(self, serves: bool, runtime: bool, dry_run_errors: list[str] | None = None) -> None:
        self.serving = serves
        self.runtime = runtime
        self.dry_run_errors = list(dry_run_errors or [])
        self.dry_runs: list[str] = []

    def serves(self, api_version: str, kind: str) -> bool:
        return self.serving

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert resource is CLUSTER_TRAINING_RUNTIME
        return {"metadata": {"name": name}} if self.runtime else None

    def apply(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        assert dry_run
        self.dry_runs.append(obj["kind"])
        if self.dry_run_errors:
            raise ClusterError(self.dry_run_errors.pop(0))
        return obj


class Session:
    def __init__(self, cluster: FakeCluster, **env: str) -> None:
        self.cluster = cluster
        self.cfg = resolve({}, {"DISCOVERY_TIMEOUT": "5s", **env})
        self.cancel = threading.Event()
        self.binary = "e2e-nvidia-training"


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The add-ons ensure() was asked for (the real one is exercised in tests/integration)."""
    asked: list[str] = []
    monkeypatch.setattr(trainer_setup, "ensure", lambda session, addon, nodes: asked.append(addon.key))
    monkeypatch.setattr(trainer_setup, "RETRY_SECONDS", 0.01)
    return asked


def test_a_cluster_without_the_crd_gets_jobset_trainer_and_the_runtime_once_their_webhooks_answer(installed):
    refused = ('apply JobSet default/x: HTTP 500: Internal error occurred: failed calling webhook '
               '"mjobset.kb.io": dial tcp 10.0.0.1:443: connect: connection refused')
    cluster = FakeCluster(serves=False, runtime=False, dry_run_errors=[refused, refused])
    trainer_setup.ensure_trainjob_api(Session(cluster), "TestMNISTTraining")  # type: ignore[arg-type]
    assert installed == ["jobset", "trainer", "torch-distributed-runtime"]
    # JobSet's webhook (twice refused, then answered), Trainer's before the runtime, a TrainJob after.
    assert cluster.dry_runs == ["JobSet", "JobSet", "JobSet", "ClusterTrainingRuntime", "TrainJob"]


def test_a_cluster_with_trainer_and_the_runtime_is_left_alone(installed):
    cluster = FakeCluster(serves=True, runtime=True)
    trainer_setup.ensure_trainjob_api(Session(cluster), "TestMNISTTraining")  # type: ignore[arg-type]
    assert installed == [] and cluster.dry_runs == []


def test_install_trainer_false_fails_naming_the_missing_crd(installed):
    with pytest.raises(ConfigError, match=r"TestBertTraining needs the TrainJob CRD \(trainer.kubeflow.org/v1alpha1\)"
                                          r".*INSTALL_TRAINER=false"):
        trainer_setup.ensure_trainjob_api(Session(FakeCluster(serves=False, runtime=False), INSTALL_TRAINER="false"),
                                          "TestBertTraining")  # type: ignore[arg-type]
    assert installed == []


def test_a_runtime_other_than_torch_distributed_is_never_installed(installed):
    cluster = FakeCluster(serves=True, runtime=False)
    trainer_setup.ensure_trainjob_api(Session(cluster, TRAINJOB_RUNTIME="torch-cuda"), "T")  # type: ignore[arg-type]
    assert installed == [] and cluster.dry_runs == []


def test_a_webhook_that_never_answers_times_out_with_its_last_refusal(installed):
    refused = 'failed calling webhook "validator.trainjob.trainer.kubeflow.org": no endpoints available'
    cluster = FakeCluster(serves=True, runtime=False, dry_run_errors=[refused] * 10_000)
    with pytest.raises(WaitTimeout, match="Kubeflow Trainer's admission webhook did not answer.*no endpoints"):
        trainer_setup.ensure_trainjob_api(Session(cluster, DISCOVERY_TIMEOUT="200ms"), "T")  # type: ignore[arg-type]


def test_a_webhook_denying_the_probe_serves_and_other_errors_are_raised(installed):
    denied = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: no'
    trainer_setup.await_webhook(Session(FakeCluster(True, True, [denied])), trainer_setup.probe_trainjob("x"),
                                "w")  # type: ignore[arg-type]
    with pytest.raises(ClusterError, match="forbidden"):
        trainer_setup.await_webhook(Session(FakeCluster(True, True, ["HTTP 403: forbidden"])),
                                    trainer_setup.probe_jobset(), "w")  # type: ignore[arg-type]


def test_the_elastic_runtime_template_is_shipped():
    assert (Path(__file__).resolve().parents[4] / "manifests" / "trainjob-elastic-runtime.yaml").is_file()
