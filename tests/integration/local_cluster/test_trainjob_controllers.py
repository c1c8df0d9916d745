"""Kubeflow Trainer v2.1.0 and JobSet v0.10.1 as `hack/local-cluster up` runs them (out of cluster,
webhooks on 127.0.0.1), driven with plain API calls, no harness launcher: what a TrainJob becomes,
how a missing runtime fails, and what JobSet's failure policy does when a pod is killed mid-run.

The TrainJobs are manifests/trainjob.yaml rendered; the `torch-distributed` ClusterTrainingRuntime is
applied from manifests/addons/ when the cluster lacks it (`up` does not install it: the suite must)
and removed after if this module applied it. Every pod runs for real on the node agent (torchrun
and gloo on 127.0.0.1). The measured times are printed (`pytest -s`) and written to
`$ARTIFACTS/integration/trainjob-facts.json` (default `_artifacts/`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness.cluster.labels import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.manifests import render

from ..conftest import REPO, LocalCluster, wait_for

pytestmark = pytest.mark.integration

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
RUNTIME_FILE = REPO / "manifests" / "addons" / "torch-distributed-runtime.yaml"
IMAGE = "registry.invalid/stood-in-for:1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
FACTS: dict[str, Any] = {}


def record(key: str, value: Any) -> None:
    """A measured fact for the TrainJob launcher's author: printed and kept for the JSON file."""
    FACTS[key] = value
    print(f"FACT {key}: {json.dumps(value, default=str)}", flush=True)


@pytest.fixture(scope="module", autouse=True)
def facts_file() -> Iterator[None]:
    yield
    folder = Path(os.environ.get("ARTIFACTS") or REPO / "_artifacts") / "integration"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainjob-facts.json").write_text(json.dumps(FACTS, indent=2, default=str) + "\n")


@pytest.fixture(scope="module")
def torch_runtime(cluster: LocalCluster) -> Iterator[str]:
    """The torch-distributed ClusterTrainingRuntime: applied when missing, removed after if applied here."""
    (runtime,) = [doc for doc in yaml.safe_load_all(RUNTIME_FILE.read_text()) if doc]
    name = runtime["metadata"]["name"]
    group, version = TRAINER
    try:
        cluster.custom.get_cluster_custom_object(group, version, "clustertrainingruntimes", name)
        created = False
    except ApiException as exc:
        if exc.status != 404:
            raise
        # Through the validating webhook on 127.0.0.1: the controller must be serving.
        cluster.custom.create_cluster_custom_object(group, version, "clustertrainingruntimes", runtime)
        created = True
    try:
        yield name
    finally:
        if created:
            cluster.custom.delete_cluster_custom_object(group, version, "clustertrainingruntimes", name)


def trainjob(name: str, namespace: str, command: list[str], args: list[str],
             env: list[dict[str, Any]] | None = None, nodes: int = 2, image: str = IMAGE,
             node_type: str = "kwok-cpu") -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, "kubetest2-training/run-id": "it", JOB_LABEL: name}
    (obj,) = render("trainjob.yaml", {
        "JobName": name, "Namespace": namespace, "Labels": labels, "PodAnnotations": {}, "Image": image,
        "WorkerReplicas": nodes, "SlotsPerWorker": 1, "Resources": {"requests": {"cpu": "1"}},
        "NodeSelector": {"node.kubernetes.io/instance-type": node_type}, "Tolerations": [], "NodeAffinity": {},
        "Command": command, "Args": args,
        "Env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *(env or [])],
        "RuntimeKind": "ClusterTrainingRuntime", "RuntimeName": "torch-distributed",
        "Volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "VolumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]})
    return obj


def create_trainjob(cluster: LocalCluster, obj: dict[str, Any]) -> None:
    group, version = TRAINER
    cluster.custom.create_namespaced_custom_object(group, version, obj["metadata"]["namespace"], "trainjobs", obj)


def get(cluster: LocalCluster, api: tuple[str, str], plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return cluster.custom.get_namespaced_custom_object(api[0], api[1], namespace, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind and found["status"] == "True":
            return found
    return None


def pods_of(cluster: LocalCluster, namespace: str, jobset: str) -> list[client.V1Pod]:
    return cluster.core.list_namespaced_pod(namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset}").items


def conditions(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [{k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in ((obj or {}).get("status") or {}).get("conditions") or []]


def test_trainjob_runs_as_a_jobset_and_trains_on_two_nodes(cluster: LocalCluster, namespace: str,
                                                           torch_runtime: str):
    name = "tj"
    started = time.monotonic()
    # torchrun takes --nnodes, --nproc-per-node, --node-rank, --master-addr/port from PET_*.
    create_trainjob(cluster, trainjob(name, namespace, ["torchrun"],
                                      ["-m", "workloads.allreduce", "--size", "tiny", "--device", "cpu"]))
    jobset = wait_for(lambda: get(cluster, JOBSET, "jobsets", namespace, name), 30, "the TrainJob's JobSet")
    record("trainjob.jobset_created_s", round(time.monotonic() - started, 1))
    replicated = jobset["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == ["node"]
    job_spec = replicated[0]["template"]["spec"]
    assert (job_spec["completions"], job_spec["parallelism"]) == (2, 2)
    record("trainjob.jobset_spec", {"network": jobset["spec"].get("network"),
                                    "failurePolicy": jobset["spec"].get("failurePolicy"),
                                    "successPolicy": jobset["spec"].get("successPolicy"),
                                    "job": {k: v for k, v in job_spec.items() if k != "template"},
                                    "restartPolicy": job_spec["template"]["spec"].get("restartPolicy")})
    assert jobset["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY  # spec.labels reach the JobSet

    def two_pods() -> list[client.V1Pod] | None:
        pods = pods_of(cluster, namespace, name)
        return pods if len(pods) == 2 else None

    pods = wait_for(two_pods, 30, "the JobSet's two pods")
    by_host = {p.spec.hostname: p for p in pods}
    assert sorted(by_host) == [f"{name}-node-0-0", f"{name}-node-0-1"]
    assert {p.spec.subdomain for p in pods} == {name}
    assert all(p.metadata.labels[JOB_LABEL] == name for p in pods)  # podTemplateOverrides' labels
    container = by_host[f"{name}-node-0-0"].spec.containers[0]
    env = {e.name: e.value if e.value_from is None else e.value_from.field_ref.field_path for e in container.env}
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "1"
    assert env["PET_MASTER_ADDR"] == f"{name}-node-0-0.{name}" and env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    record("trainjob.pod_env", {k: v for k, v in env.items() if k.startswith("PET_")})
    record("trainjob.pod_names", sorted(p.metadata.name for p in pods))

    done = wait_for(lambda: condition(get(cluster, TRAINER, "trainjobs", namespace, name), "Complete")
                    or _failed(cluster, namespace, name), 240, "the TrainJob to complete")
    record("trainjob.complete_s", round(time.monotonic() - started, 1))
    trainjob_obj = get(cluster, TRAINER, "trainjobs", namespace, name)
    record("trainjob.status", trainjob_obj["status"])
    assert done["type"] == "Complete", conditions(trainjob_obj)
    record("trainjob.jobset_status", get(cluster, JOBSET, "jobsets", namespace, name)["status"])
    # Rank 0's log: the sweep over 2 ranks, which only PET_NNODES=2 and the rendezvous at
    # PET_MASTER_ADDR:PET_MASTER_PORT (127.0.0.1, the job's own port) can have given it.
    log = cluster.core.read_namespaced_pod_log(by_host[f"{name}-node-0-0"].metadata.name, namespace)
    assert "# all-reduce sweep: 2 ranks, backend gloo" in log, log[-2000:]
    assert "# Out of bounds values : 0 OK" in log


def _failed(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    return condition(get(cluster, TRAINER, "trainjobs", namespace, name), "Failed")


def test_a_trainjob_naming_a_missing_runtime_is_rejected_at_once(cluster: LocalCluster, namespace: str):
    obj = trainjob("tj-missing", namespace, ["torchrun"], ["-m", "workloads.allreduce"])
    obj["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    started = time.monotonic()
    with pytest.raises(ApiException) as raised:
        create_trainjob(cluster, obj)
    elapsed = time.monotonic() - started
    body = json.loads(raised.value.body)
    record("missing_runtime.rejection", {"http_status": raised.value.status, "reason": body.get("reason"),
                                         "message": body.get("message"), "seconds": round(elapsed, 3)})
    assert raised.value.status in (400, 403, 422)
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in body["message"]
    assert "no-such-runtime" in body["message"]
    # At once: the create call's own answer (raised by the call, nothing created, checked below),
    # not a wait. The bound only guards against a client that retries a refusal; 5 s was a speed
    # target for a webhook call on a loaded host, 30 s leaves it room.
    assert elapsed < 30
    assert get(cluster, TRAINER, "trainjobs", namespace, "tj-missing") is None


# A gloo all-reduce every 0.2 s: long in the first attempt (a pod is killed there), short after the
# restart. RESTART_ATTEMPT is JobSet's pod label, through the downward API.
LOOP = ("import os, time, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
        "attempt = os.environ['RESTART_ATTEMPT']; steps = 1500 if attempt == '0' else 5\n"
        "for step in range(steps):\n"
        "    t = torch.ones(1); dist.all_reduce(t)\n"
        "    print('attempt', attempt, 'rank', dist.get_rank(), 'step', step, 'sum', int(t.item()), flush=True)\n"
        "    time.sleep(0.2)\n"
        "dist.destroy_process_group()")


def restart_runtime(namespace: str, max_restarts: int) -> dict[str, Any]:
    """torch-distributed as a namespaced TrainingRuntime with a JobSet failure policy: a Job that
    fails (backoffLimit 0: its first failed pod) restarts the whole set, up to max_restarts times."""
    (runtime,) = [doc for doc in yaml.safe_load_all(RUNTIME_FILE.read_text()) if doc]
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "torch-restarts", "namespace": namespace}
    runtime["spec"]["template"]["spec"]["failurePolicy"] = {"maxRestarts": max_restarts}
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    return runtime


def test_a_pod_killed_mid_run_restarts_the_jobset_by_its_failure_policy(cluster: LocalCluster, namespace: str):
    name = "tj-restart"
    runtime = restart_runtime(namespace, max_restarts=2)
    group, version = TRAINER
    cluster.custom.create_namespaced_custom_object(group, version, namespace, "trainingruntimes", runtime)
    attempt = {"fieldRef": {"fieldPath": f"metadata.labels['{RESTART_ATTEMPT_LABEL}']"}}
    obj = trainjob(name, namespace, ["torchrun"], ["--no-python", "python", "-c", LOOP],
                   env=[{"name": "RESTART_ATTEMPT", "valueFrom": attempt}])
    obj["spec"]["runtimeRef"] = {"apiGroup": group, "kind": "TrainingRuntime", "name": runtime["metadata"]["name"]}
    create_trainjob(cluster, obj)

    def worker_stepping() -> client.V1Pod | None:
        for pod in pods_of(cluster, namespace, name):
            if pod.spec.hostname == f"{name}-node-0-1" and pod.status.phase == "Running":
                log = cluster.core.read_namespaced_pod_log(pod.metadata.name, namespace)
                if "attempt 0 rank 1 step 5 " in log:
                    return pod
        return None

    victim = wait_for(worker_stepping, 180, "worker 1 to train (attempt 0)", interval_s=1)
    killed = time.monotonic()
    cluster.core.delete_namespaced_pod(victim.metadata.name, namespace)
    record("restart.killed_pod", victim.metadata.name)

    def restarted() -> dict[str, Any] | None:
        jobset = get(cluster, JOBSET, "jobsets", namespace, name)
        return jobset if (jobset.get("status") or {}).get("restarts", 0) >= 1 else None

    jobset = wait_for(restarted, 120, "the JobSet to restart")
    record("restart.jobset_restarts_after_s", round(time.monotonic() - killed, 1))
    record("restart.jobset_status_at_restart", jobset["status"])
    jobs = cluster.batch.list_namespaced_job(namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}").items
    record("restart.jobs_at_restart", [
        {"name": j.metadata.name, "restart_attempt": j.metadata.labels.get(RESTART_ATTEMPT_LABEL),
         "conditions": [(c.type, c.status, c.reason, c.message) for c in j.status.conditions or []]} for j in jobs])

    def attempt_1_running() -> list[client.V1Pod] | None:
        pods = [p for p in pods_of(cluster, namespace, name) if p.metadata.labels.get(RESTART_ATTEMPT_LABEL) == "1"
                and p.status.phase in ("Running", "Succeeded")]
        return pods if len(pods) == 2 else None

    wait_for(attempt_1_running, 120, "both pods of restart attempt 1 to run")
    record("restart.new_pods_running_after_s", round(time.monotonic() - killed, 1))
    done = wait_for(lambda: condition(get(cluster, TRAINER, "trainjobs", namespace, name), "Complete")
                    or _failed(cluster, namespace, name), 180, "the TrainJob to finish after the restart")
    record("restart.trainjob_finished_after_s", round(time.monotonic() - killed, 1))
    final = get(cluster, TRAINER, "trainjobs", namespace, name)
    record("restart.trainjob_status", final["status"])
    record("restart.jobset_final_status", get(cluster, JOBSET, "jobsets", namespace, name)["status"])
    events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    record("restart.events", [(e.involved_object.kind, e.type, e.reason, e.message) for e in events])
    assert done["type"] == "Complete", conditions(final)
    assert get(cluster, JOBSET, "jobsets", namespace, name)["status"]["restarts"] == 1
    logs = [cluster.core.read_namespaced_pod_log(p.metadata.name, namespace) for p in pods_of(cluster, namespace, name)
            if p.metadata.labels.get(RESTART_ATTEMPT_LABEL) == "1"]
    assert sum("attempt 1 rank" in log and "step 4 sum 2" in log for log in logs) == 2, logs
