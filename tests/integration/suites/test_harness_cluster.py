"""The harness's cluster operations against the real API server of the local cluster.

apply (core objects and an MPIJob), watch-based waits (success and every failure mode, injected
through kwok), log capture of several pods and containers, deletion, discovery on both node
shapes, and every manifest template checked by a server-side dry-run. Pods here are kwok's and
their logs canned (localcluster/emulation/canned_logs/).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from harness.cluster.cancel import CancelToken
from harness.cluster.client import Cluster
from harness.cluster.conditions import (
    any_pod_failed,
    deleted,
    job_failed,
    job_succeeded,
    log_line_matches,
    mpijob_succeeded,
    pods_ready,
    pods_succeeded,
)
from harness.cluster.labels import MANAGED_BY_LABEL
from harness.cluster.logs import capture_pod_logs
from harness.cluster.manifests import render
from harness.cluster.resources import CLUSTER_TRAINING_RUNTIME, JOB, MPIJOB, POD
from harness.cluster.wait import TICK_SECONDS, wait_for
from harness.config.settings import NCCL_TESTS_IMAGE, Source, resolve
from harness.errors import ClusterError, ConfigError, JobFailed, WaitTimeout
from harness.framework.cli import parse_args
from harness.jobs.launchers.base import security_context
from harness.jobs.launchers.mpi import SSHD_CAPABILITIES
from harness.setup.discovery import discover

from ..conftest import INJECT, REPO, LocalCluster, canned_by_default
from ..conftest import wait_for as poll

pytestmark = pytest.mark.integration

TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
LABELS = {MANAGED_BY_LABEL: "kubetest2-training", "kubetest2-training/run-id": "it"}


@pytest.fixture
def kube(cluster: LocalCluster) -> Cluster:
    return Cluster.connect(str(cluster.kubeconfig), retry_budget=30)


def job(name: str, namespace: str, annotations: dict[str, str] | None = None, containers: int = 1,
        gpus: int = 0, completions: int = 1, restart_policy: str = "Never") -> dict:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "spec": {
            "backoffLimit": 0 if restart_policy == "Never" else 6, "completions": completions,
            "parallelism": completions,
            "template": {
                "metadata": {"labels": {**LABELS, "job": name}, "annotations": canned_by_default(annotations)},
                "spec": {"restartPolicy": restart_policy, "containers": [
                    {"name": f"c{i}", "image": "registry.invalid/never-pulled:1", "command": ["train"],
                     "resources": resources} for i in range(containers)]},
            },
        },
    }


def wait_job(kube: Cluster, namespace: str, name: str, grace: float = 1.0, timeout: float = 60) -> str:
    return wait_for(kube, job_succeeded(namespace, name),
                    fails_on=[job_failed(namespace, name), any_pod_failed(namespace, f"job={name}", grace)],
                    timeout=timeout)


def test_apply_is_idempotent_and_labels_survive(kube: Cluster, namespace: str):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "cm", "namespace": namespace, "labels": LABELS}, "data": {"a": "1"}}
    first = kube.apply(config_map)
    config_map["data"]["a"] = "2"
    second = kube.apply(config_map)
    assert second["data"] == {"a": "2"}
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["labels"][MANAGED_BY_LABEL] == "kubetest2-training"


def test_job_success_is_seen_through_the_watch(kube: Cluster, namespace: str):
    kube.apply(job("ok", namespace, {INJECT + "run-duration": "1s"}))
    assert wait_job(kube, namespace, "ok") == "job ok succeeded"
    seen = datetime.now(timezone.utc)
    # Seen as the Job completed, not at a later poll: timed from the Complete condition the API
    # server stamped (whole seconds, so up to 1 s early), not from the apply, which would time kwok
    # and the Job controller on a loaded host too. A watch delivers it within ~TICK_SECONDS here;
    # 10 s leaves room for a host several times slower and still fails a wait that polls slowly.
    (complete,) = [c for c in kube.get(JOB, "ok", namespace)["status"]["conditions"] if c["type"] == "Complete"]
    completed = datetime.fromisoformat(complete["lastTransitionTime"].replace("Z", "+00:00"))
    assert (seen - completed).total_seconds() < 10, (seen, complete)


@pytest.mark.parametrize(("mode", "extra", "expected"), [
    ("exit-code", {INJECT + "exit-code": "3"}, "exited with code 3"),
    ("oom", {}, "OOMKilled on node"),
    ("image-pull", {}, "ImagePull"),  # ErrImagePull, then ImagePullBackOff
])
def test_each_failure_fails_fast_naming_pod_and_node(kube: Cluster, namespace: str, mode, extra, expected):
    kube.apply(job("bad", namespace, {INJECT + "fail": mode, **extra}))
    started = time.monotonic()
    with pytest.raises(JobFailed) as failure:
        wait_job(kube, namespace, "bad", grace=1.0)
    elapsed = time.monotonic() - started
    assert expected in str(failure.value)
    assert "on node kwok-" in str(failure.value)
    assert failure.value.pod and failure.value.pod.startswith("bad-")
    # JobFailed, not the WaitTimeout of 60 s: the fault ended the wait. The time, from the apply,
    # holds kwok, the scheduler and the Job controller too: 40 s gives a loaded host room (20 s
    # did not always) and still ends the wait well before its timeout.
    assert elapsed < 40, f"{mode}: verdict took {elapsed:.1f}s"


def test_crash_loop_fails_fast(kube: Cluster, namespace: str):
    kube.apply(job("crash", namespace, {INJECT + "fail": "crashloop", INJECT + "run-duration": "500ms"},
                   restart_policy="OnFailure"))
    with pytest.raises(JobFailed, match="CrashLoopBackOff"):
        wait_job(kube, namespace, "crash")


def test_unschedulable_fails_after_grace_quoting_the_scheduler(kube: Cluster, namespace: str):
    kube.apply(job("big", namespace, gpus=99))
    started = time.monotonic()
    with pytest.raises(JobFailed, match=r"unschedulable for \d+s: .*nvidia.com/gpu"):
        wait_job(kube, namespace, "big", grace=2.0)
    # After the 2 s grace, not the 60 s timeout (JobFailed says so); room as above.
    assert time.monotonic() - started < 40


def test_timeout_says_timeout_and_last_state(kube: Cluster, namespace: str):
    kube.apply(job("slow", namespace, {INJECT + "run-duration": "10m"}))
    with pytest.raises(WaitTimeout) as timeout:
        wait_job(kube, namespace, "slow", timeout=3)
    assert str(timeout.value).startswith("TIMEOUT: waited 3s for job slow to succeed")
    assert "pod slow-" in str(timeout.value)


def test_cancel_interrupts_a_wait_at_once(kube: Cluster, namespace: str):
    from harness.errors import Interrupted

    kube.apply(job("long", namespace, {INJECT + "run-duration": "10m"}))
    cancel = CancelToken()
    import threading

    cancelled_at: list[float] = []

    def cancel_now() -> None:
        cancelled_at.append(time.monotonic())
        cancel.cancel("INTERRUPTED: received SIGTERM")

    threading.Timer(1.0, cancel_now).start()
    with pytest.raises(Interrupted, match="INTERRUPTED: received SIGTERM"):
        wait_for(kube, job_succeeded(namespace, "long"), timeout=60, cancel=cancel)
    # Interrupted, not WaitTimeout: the wait ended because of the cancel. "At once": timed from the
    # cancel itself (a loaded host may fire the timer late), the wait looks at the token every
    # TICK_SECONDS (0.5 s); 10 ticks leave room for a host 50% slower many times over.
    assert time.monotonic() - cancelled_at[0] < 10 * TICK_SECONDS


def wait_for_log(cluster: LocalCluster, namespace: str, pod: str) -> None:
    for container in ("c0", "c1"):
        # A deadline for an agent that never writes them, not a guess at a loaded host's speed.
        poll(lambda c=container: _has_log(cluster, namespace, pod, c), 60, f"log of {pod}/{container}")


def _has_log(cluster: LocalCluster, namespace: str, pod: str, container: str) -> bool:
    try:
        return bool(cluster.core.read_namespaced_pod_log(pod, namespace, container=container, tail_lines=1))
    except ApiException:
        return False


def test_log_capture_of_several_pods_and_containers(cluster: LocalCluster, kube: Cluster, namespace: str,
                                                     tmp_path: Path):
    annotations = {INJECT + "canned-log": "bert-mpirun-32ranks", INJECT + "canned-log-c1": "bert-mpirun-missing-env",
                   INJECT + "run-duration": "1s"}
    kube.apply(job("logs", namespace, annotations, containers=2, completions=3))
    wait_job(kube, namespace, "logs")
    pods = kube.list(POD, namespace, label_selector="job=logs")["items"]
    # kwok's pods can finish before the node agent wrote their (canned) log files.
    for pod in pods:
        wait_for_log(cluster, namespace, pod["metadata"]["name"])
    captured = capture_pod_logs(kube, namespace, pods, tmp_path)
    assert len(captured) == 6
    canned = (REPO / "localcluster" / "emulation" / "canned_logs")
    for entry in captured:
        text = entry.path.read_text().splitlines()
        assert text[0] == f"=== pod {entry.pod} | node {entry.node} | container {entry.container}"
        source = "bert-mpirun-32ranks" if entry.container == "c0" else "bert-mpirun-missing-env"
        assert text[1:] == (canned / f"{source}.log").read_text().splitlines()
        assert entry.path.name == f"{entry.pod}.{entry.container}.log"
        assert entry.node.startswith("kwok-")


def test_delete_and_wait_until_gone(kube: Cluster, namespace: str):
    kube.apply(job("gone", namespace, {INJECT + "run-duration": "10m"}))
    assert kube.delete(JOB, "gone", namespace) is True
    assert wait_for(kube, deleted(JOB, "gone", namespace), timeout=30) == "job gone deleted"
    assert kube.get(JOB, "gone", namespace) is None
    assert kube.delete(JOB, "gone", namespace) is False
    # Something that is not there at all is deleted as soon as it is listed.
    assert wait_for(kube, deleted(JOB, "never-was", namespace), timeout=10) == "job never-was deleted"


def shell_pod(name: str, namespace: str, script: str) -> dict:
    """A pod the node agent runs for real (no canned log): `sh -c script`."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {**LABELS, "pod": name}},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [
                {"name": "main", "image": "registry.invalid/shell:1", "command": ["sh", "-c", script]}]}}


CHECKPOINT = re.compile(r"saved checkpoint at step (\d+)")


def test_a_log_line_is_seen_as_it_is_written(kube: Cluster, namespace: str):
    kube.apply(shell_pod("ticker", namespace, "echo starting; sleep 2; echo saved checkpoint at step 5; sleep 60"))
    wait_for(kube, pods_ready(namespace, "pod=ticker", 1), timeout=60)
    line = wait_for(kube, log_line_matches(namespace, "ticker", CHECKPOINT), timeout=30)
    assert line == "saved checkpoint at step 5"
    # Seen as it was written, not when the log ended: the pod (60 s more of sleep) still runs.
    # (A bound of 10 s from the pod's start was the stand-in for this, and broke on a loaded host.)
    assert kube.get(POD, "ticker", namespace)["status"]["phase"] == "Running"


def test_a_log_that_ends_without_the_line_fails_naming_the_pod(kube: Cluster, namespace: str):
    kube.apply(shell_pod("quiet", namespace, "echo nothing to see here"))
    wait_for(kube, pods_succeeded(namespace, "pod=quiet", 1), timeout=60)
    with pytest.raises(JobFailed, match="the log of quiet ended without a line matching") as failure:
        wait_for(kube, log_line_matches(namespace, "quiet", CHECKPOINT), timeout=30)
    assert failure.value.pod == "quiet"


def test_mpijob_applies_and_succeeds(kube: Cluster, namespace: str):
    fields = {"JobName": "mpi", "Namespace": namespace, "Labels": LABELS, "PodAnnotations": canned_by_default(None),
              "Image": "registry.invalid/x:1", "ImagePullPolicy": "IfNotPresent",
              "SecurityContext": security_context("registry.invalid/x:1"),
              "WorkerSecurityContext": security_context("registry.invalid/x:1", SSHD_CAPABILITIES),
              "WorkerReplicas": 2, "SlotsPerWorker": 1,
              "Resources": {"requests": {"cpu": "1"}}, "NodeSelector": {},
              "LauncherCommand": ["mpirun", "-np", "2", "python", "train.py"], "LauncherEnv": [], "BackoffLimit": 0,
              "Tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
              "NodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                  for name in ("kwok-cpu-0", "kwok-cpu-1")]}}}
    for obj in render("mpijob.yaml", fields):
        kube.apply(obj)
    assert kube.get(MPIJOB, "mpi", namespace) is not None
    assert wait_for(kube, mpijob_succeeded(namespace, "mpi"), timeout=90) == "mpijob mpi succeeded"


def cfg_for(**env: str):
    return resolve(parse_args([]), env)


def test_discovery_on_cpu_nodes(kube: Cluster):
    cfg = cfg_for(ACCELERATOR="cpu")
    topology = discover(kube, cfg, CancelToken())
    assert topology.node_type == "kwok-cpu" and topology.node_count == len(topology.nodes) >= 1
    assert topology.gpus_per_node == 1
    assert topology.origins["node_count"].source is Source.DISCOVERED
    assert cfg.node_count is None  # the configuration stays as the user gave it


def test_discovery_on_cpu_nodes_with_nvidia_waits_then_says_why(kube: Cluster):
    cfg = cfg_for(ACCELERATOR="nvidia", DISCOVERY_TIMEOUT="2s")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="advertise >= 1 nvidia.com/gpu after 2s"):
        discover(kube, cfg, CancelToken())
    assert 2 <= time.monotonic() - started < 10


def test_discovery_on_gpu_nodes_with_efa(default_nodes: LocalCluster, kube: Cluster):
    default_nodes.set_nodes("gpu", 2, efa=4)
    topology = discover(kube, cfg_for(), CancelToken())
    assert (topology.node_type, topology.node_count, topology.gpus_per_node, topology.efa_per_node) == (
        "p4d.24xlarge", 2, 8, 4)
    assert [n.gpus for n in topology.nodes] == [8, 8]
    # What a p4d.24xlarge should have (the table), not the fewest a node advertises.
    assert str(topology.origins["gpus_per_node"]) == ("derived: nvidia.com/gpu: p4d.24xlarge table in "
                                                      "harness/verdict/thresholds.yaml (source aws-ec2-specs)")
    with pytest.raises(ConfigError, match="NODE_COUNT=3 but only 2 Ready p4d.24xlarge nodes"):
        discover(kube, cfg_for(NODE_COUNT="3"), CancelToken())
    with pytest.raises(ConfigError, match="no Ready node of type 'p5.48xlarge'"):
        discover(kube, cfg_for(NODE_TYPE="p5.48xlarge"), CancelToken())


TEMPLATE_FIELDS = {
    "torchrun-job.yaml": {"Command": ["torchrun"], "Args": ["-m", "workloads.bert"], "MasterPort": 29500,
                          "BackoffLimit": 0, "ActiveDeadlineSeconds": 600},
    "mpijob.yaml": {"SlotsPerWorker": 8, "LauncherCommand": ["mpirun", "-np", "16", "python", "-m", "x"],
                    "LauncherEnv": [{"name": "NUM_GPUS_PER_NODE", "value": "8"}], "BackoffLimit": 1,
                    # another image's shape: the runtime's defaults, sshd's capabilities added
                    "WorkerSecurityContext": security_context("repo/train:1", SSHD_CAPABILITIES)},
    "per-node-job.yaml": {"NodeName": "kwok-cpu-0", "GPUPerNode": 8,
                          "Requests": {"cpu": "8", "memory": "8Gi"}, "Command": ["nvidia-smi", "-L"],
                          "ActiveDeadlineSeconds": 960,
                          "VolumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                                           {"name": "host-0", "mountPath": "/host/proc", "readOnly": True}],
                          "Volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                                      {"name": "host-0", "hostPath": {"path": "/proc"}}]},
    "shared-gpu-job.yaml": {"NodeName": "kwok-cpu-0", "Pods": 32,
                            "Command": ["nvidia-smi", "--query-gpu=uuid,compute_mode", "--format=csv,noheader"]},
    "daemonset.yaml": {"Command": ["sh", "-c", "true"],
                       "VolumeMounts": [{"name": "host-0", "mountPath": "/host-etc/containerd", "readOnly": True}],
                       "Volumes": [{"name": "host-0", "hostPath": {"path": "/etc/containerd"}}]},
    "rbac.yaml": {},
    "rbac-addons.yaml": {},
    "trainjob.yaml": {"Command": ["torchrun"], "Args": ["-m", "workloads.allreduce"], "SlotsPerWorker": 8,
                      "RuntimeKind": "ClusterTrainingRuntime", "RuntimeName": "torch-distributed",
                      "Volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                      "VolumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]},
    "trainjob-elastic-runtime.yaml": {"MaxRestarts": 3},
    # nvidia-dra: the DeviceClasses dranet and NVIDIA's chart make, and upstream's p5 claim templates.
    "dra-device-classes.yaml": {},
    "dra-p5-resource-claim-templates.yaml": {},
    "elasticjob.yaml": {"MasterClusterRole": "kubetest2-training-dlrover-master", "RestartCount": 3,
                        "Command": ["dlrover-run"], "Args": ["--nnodes=4", "-m", "workloads.nanogpt"],
                        "Volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                        "VolumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]},
}
# Trainer's webhook refuses a TrainJob whose runtime does not exist, dry run or not.
TRAINJOB_RUNTIME = REPO / "manifests" / "addons" / "torch-distributed-runtime.yaml"


@pytest.mark.parametrize("template", sorted(p.name for p in (REPO / "manifests").glob("*.yaml")))
@pytest.mark.parametrize("accelerator", ["cpu", "nvidia"])
def test_every_manifest_passes_server_side_dry_run(kube: Cluster, namespace: str, template: str, accelerator: str):
    assert template in TEMPLATE_FIELDS, f"add representative fields for new template {template}"
    resources = ({"requests": {"cpu": "1"}} if accelerator == "cpu"
                 else {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4},
                       "requests": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}})
    fields = {"JobName": "dry", "Namespace": namespace, "Labels": LABELS, "PodAnnotations": {"a": "b"},
              "Image": "repo/train:1", "ImagePullPolicy": "IfNotPresent", "WorkerReplicas": 4, "Resources": resources,
              "NodeSelector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
              "Tolerations": TOLERATIONS,
              # this project's images' shape: every capability dropped but the program's
              "SecurityContext": security_context(NCCL_TESTS_IMAGE, ("CHOWN",)),
              "NodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["kwok-cpu-0"]}]}]}},
              "Env": [{"name": "NUM_GPUS_PER_NODE", "value": "8"},
                      {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
              **TEMPLATE_FIELDS[template]}
    used = {k: v for k, v in fields.items() if "{{." + k + "}}" in (REPO / "manifests" / template).read_text()}
    created = []
    if template == "trainjob.yaml":
        for runtime in yaml.safe_load_all(TRAINJOB_RUNTIME.read_text()):
            if runtime and kube.get(CLUSTER_TRAINING_RUNTIME, runtime["metadata"]["name"]) is None:
                kube.apply(runtime)
                created.append(runtime["metadata"]["name"])
    try:
        for obj in render(template, used):
            try:
                kube.apply(obj, dry_run=True)
            except ClusterError as error:
                pytest.fail(f"{template} ({accelerator}) rejected by the API server: {error}")
    finally:  # the TrainJob tests install the runtime themselves when it is missing: leave none behind
        for name in created:
            kube.delete(CLUSTER_TRAINING_RUNTIME, name)
