"""LAUNCHER=dlrover without a cluster: the ElasticJob and its master's RoleBinding rendered from a
Workload and a Placement, which pods run ranks (DLRover's master does not; a relaunched worker keeps
its rank), what says the job ended (conditions on canned ElasticJob objects, in the status DLRover's
operator writes), the operator log's lines kept for the JUnit, and the set-up's checks against a fake
cluster. DLRover's real operator and master run on the real nodes in
tests/integration/realnodes/test_real_node_workloads.py."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.cluster.conditions import elasticjob_failed, elasticjob_succeeded
from harness.cluster.manifests import render
from harness.cluster.pods import pod_role
from harness.cluster.resources import CLUSTER_ROLE, ELASTICJOB, Resource
from harness.cluster.watch import ClusterState
from harness.config.settings import resolve
from harness.errors import ConfigError
from harness.jobs import operator_logs
from harness.jobs.launchers import LAUNCHERS, rank_locations
from harness.jobs.launchers.base import worker_index
from harness.jobs.launchers.dlrover import MASTER_CLUSTER_ROLE, OPERATOR
from harness.jobs.launchers.trainjob import CHECKPOINT_ROOT
from harness.jobs.workload import Workload
from harness.setup import operators

from .test_trainjob_launcher import placement

LAUNCHER = LAUNCHERS["dlrover"]
NANOGPT = Workload("nanogpt-training", "workloads.nanogpt", ("--size", "tiny"))
ELASTIC = Workload("nanogpt-elastic", "workloads.nanogpt", ("--checkpoint-dir", "/c"), elastic=True, max_restarts=3)


def rendered(workload: Workload, **where: Any) -> dict[str, dict[str, Any]]:
    objects = [obj for r in LAUNCHER.renderings(workload, placement(**where)) for obj in render(r.template, r.fields)]
    return {obj["kind"]: obj for obj in objects}


def test_an_elasticjob_runs_dlrover_run_on_each_node_with_the_placements_processes():
    objects = rendered(NANOGPT, accelerator="nvidia", per_node=8)
    job = objects["ElasticJob"]
    assert job["apiVersion"] == "elastic.iml.github.io/v1alpha1" and job["metadata"]["name"] == "nanogpt-training"
    assert job["spec"]["distributionStrategy"] == "AllreduceStrategy"
    master = job["spec"]["replicaSpecs"]["dlrover-master"]["template"]["spec"]["containers"][0]
    assert master["image"] == "repo/train:1"  # the master runs DLRover's master module from the same image
    worker = job["spec"]["replicaSpecs"]["worker"]
    assert worker["replicas"] == 2 and worker["restartCount"] == 0  # not elastic: a lost worker fails it
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == ["dlrover-run"]
    assert container["args"] == ["--nnodes=2", "--nproc_per_node=8", "--max-restarts=0",
                                 "-m", "workloads.nanogpt", "--size", "tiny"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    env = {e["name"] for e in container["env"]}
    assert "MASTER_ADDR" not in env and "NCCL_DEBUG" in env  # DLRover's rendezvous gives the address
    assert worker["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "kwok-cpu"}


def test_the_master_is_bound_to_the_masters_cluster_role_in_the_jobs_namespace_only():
    binding = rendered(NANOGPT)["RoleBinding"]
    assert binding["metadata"]["namespace"] == "ns"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": MASTER_CLUSTER_ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "default", "namespace": "ns"}]


def test_cpu_workers_request_memory_since_the_master_makes_requests_limits():
    # DLRover's master sets limits = requests; without a memory request the limit would be 0Mi.
    (rendering,) = LAUNCHER.renderings(NANOGPT, replace(placement(), node_allocatable_memory=8 * 2**30))
    assert rendering.fields["Resources"] == {"requests": {"cpu": "1", "memory": str(4 * 2**30)}}


def test_an_elastic_elasticjob_relaunches_workers_and_keeps_checkpoints_on_the_node():
    worker = rendered(ELASTIC)["ElasticJob"]["spec"]["replicaSpecs"]["worker"]
    assert worker["restartCount"] == 3
    spec = worker["template"]["spec"]
    assert "--max-restarts=3" in spec["containers"][0]["args"]
    checkpoints = {"name": "checkpoints", "hostPath": {"path": CHECKPOINT_ROOT, "type": "DirectoryOrCreate"}}
    assert checkpoints in spec["volumes"]
    assert worker["template"]["metadata"]["annotations"]["kubetest2-training/dlrover-restart-count"] == "3"


def dlrover_pod(name: str, replica_type: str, rank: str | None = None, phase: str = "Running",
                annotations: dict[str, str] | None = None, created: str = "2026-12-07T00:00:00Z") -> dict[str, Any]:
    labels = {"elasticjob.dlrover/replica-type": replica_type, "kubetest2-training/job": "nanogpt-elastic"}
    if rank is not None:
        labels["elasticjob.dlrover/rank-index"] = rank
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels, "annotations": annotations or {},
                         "creationTimestamp": created},
            "spec": {"nodeName": f"node-of-{name}"}, "status": {"phase": phase}}


def test_the_master_runs_no_rank_and_a_relaunched_worker_keeps_its_rank():
    master = dlrover_pod("elasticjob-nanogpt-elastic-dlrover-master", "dlrover-master")
    first = dlrover_pod("nanogpt-elastic-edljob-worker-0", "worker", "0")
    lost = dlrover_pod("nanogpt-elastic-edljob-worker-1", "worker", "1")
    relaunched = dlrover_pod("nanogpt-elastic-edljob-worker-2", "worker", "1", created="2026-12-07T00:01:00Z")
    assert (pod_role(master), pod_role(first)) == ("launcher", "worker")
    assert worker_index(master) is None
    assert worker_index(relaunched) == 1  # its rank label, not its name's new node id
    lost["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:30Z"
    locations = rank_locations([master, first, lost, relaunched], 1)
    assert locations == {0: (first["metadata"]["name"], "node-of-nanogpt-elastic-edljob-worker-0"),
                         1: (relaunched["metadata"]["name"], "node-of-nanogpt-elastic-edljob-worker-2")}
    assert LAUNCHER.worker_selector(ELASTIC) == ("kubetest2-training/job=nanogpt-elastic,"
                                                 "elasticjob.dlrover/replica-type=worker")


def test_a_failed_worker_of_an_elastic_job_is_the_masters_to_relaunch():
    annotated = {"kubetest2-training/dlrover-restart-count": "3"}
    assert LAUNCHER.retried(dlrover_pod("w", "worker", "0", "Failed", annotated))
    assert not LAUNCHER.retried(dlrover_pod("w", "worker", "0", "Failed"))  # not elastic: it fails the test
    assert not LAUNCHER.retried(dlrover_pod("m", "dlrover-master", None, "Failed", annotated))


def elasticjob(condition: str | None) -> dict[str, Any]:
    """An ElasticJob as DLRover's operator leaves it (common.UpdateStatus: conditions and phase)."""
    conditions = [{"type": "Running", "status": "False", "reason": "JobRunning"}]
    if condition:
        conditions.append({"type": condition, "status": "True", "reason": f"Job{condition}",
                           "message": f"job(ns/nanogpt-training) has {condition.lower()}"})
    # As the real operator wrote it (objects.yaml of a real-node run): the conditions one level down.
    return {"apiVersion": ELASTICJOB.api_version, "kind": "ElasticJob",
            "metadata": {"name": "nanogpt-training", "namespace": "ns", "resourceVersion": "1"},
            "status": {"phase": condition or "Running", "status": {"conditions": conditions}}}


@pytest.mark.parametrize(("condition", "succeeded", "failed"), [
    (None, False, False), ("Succeeded", True, False), ("Failed", False, True)])
def test_the_elasticjobs_conditions_end_the_wait(condition: str | None, succeeded: bool, failed: bool):
    state = ClusterState()
    state.update("ElasticJob", "ADDED", elasticjob(condition))
    assert bool(elasticjob_succeeded("ns", "nanogpt-training").check(state, 0.0)) is succeeded
    message = elasticjob_failed("ns", "nanogpt-training").check(state, 0.0)
    assert bool(message) is failed
    if failed:
        assert "JobFailed" in message


def test_the_operator_lines_kept_are_those_since_the_launch_that_name_the_job(tmp_path: Path):
    log = tmp_path / "operator.log"
    log.write_text('time="t0" level=info msg="jobName: nanogpt-training, phase Running"\n')  # an earlier run's
    t = FakeTest(tmp_path, log)
    start = operator_logs.mark(t, OPERATOR)
    with log.open("a") as out:
        out.write('time="t1" level=info msg="jobName: nanogpt-training, phase Pending"\n'
                  'time="t1" level=info msg="jobName: other-job, phase Running"\n'
                  'time="t2" level=info msg="Job nanogpt-training failed"\n')
    operator_logs.collect(t, start, "nanogpt-training", "ns")
    kept = (tmp_path / "logs" / "operator-dlrover-elasticjob-operator.log").read_text().splitlines()
    assert kept == ['time="t1" level=info msg="jobName: nanogpt-training, phase Pending"',
                    'time="t2" level=info msg="Job nanogpt-training failed"']
    assert t.properties["operator.dlrover-elasticjob-operator.lines"] == 2
    (output,) = t.outputs
    assert output.startswith("==== DLRover ElasticJob operator: 2 of its 3 lines since the launch name") and \
        "Job nanogpt-training failed" in output


def test_an_operator_log_that_is_not_there_is_said_so(tmp_path: Path):
    t = FakeTest(tmp_path, tmp_path / "missing.log")
    operator_logs.collect(t, operator_logs.mark(t, OPERATOR), "nanogpt-training", "ns")
    assert f"from no file {tmp_path / 'missing.log'}" in t.outputs[0]


class FakeTest:
    """What operator_logs uses of a TestContext."""

    def __init__(self, artifacts: Path, log: Path) -> None:
        self.cfg = SimpleNamespace(dlrover_operator_log=str(log))
        self.artifacts_dir = artifacts
        self.properties: dict[str, Any] = {}
        self.outputs: list[str] = []

    def property(self, key: str, value: Any) -> None:
        self.properties[key] = value

    def attach_output(self, text: str) -> None:
        self.outputs.append(text)


class FakeCluster:
    """Serves ElasticJobs or not, has the master's ClusterRole or not, may create it or not."""

    def __init__(self, serves: bool, role: bool, may_create: bool) -> None:
        self.serving, self.role, self.may_create = serves, role, may_create
        self.applied: list[dict[str, Any]] = []

    def serves(self, api_version: str, kind: str) -> bool:
        return self.serving

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert resource is CLUSTER_ROLE and name == MASTER_CLUSTER_ROLE
        return {"metadata": {"name": name}} if self.role else None

    def allowed(self, verb: str, group: str, resource: str, namespace: str | None = None) -> bool:
        assert (verb, group, resource) == ("create", "rbac.authorization.k8s.io", "clusterroles")
        return self.may_create

    def apply(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        self.applied.append(obj)
        return obj


def session(cluster: FakeCluster) -> SimpleNamespace:
    return SimpleNamespace(cluster=cluster, cfg=resolve({}, {}), cancel=threading.Event(), binary="e2e-nvidia-training")


def test_a_cluster_without_dlrovers_operator_fails_naming_it():
    with pytest.raises(ConfigError, match="needs the ElasticJob CRD .* install DLRover's ElasticJob operator"):
        operators.ensure_api(session(FakeCluster(serves=False, role=True, may_create=True)), ELASTICJOB, "TestX")


def test_the_masters_cluster_role_is_created_when_missing_and_allowed_else_named():
    cluster = FakeCluster(serves=True, role=False, may_create=True)
    operators.ensure_api(session(cluster), ELASTICJOB, "TestX")
    (role,) = cluster.applied
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == MASTER_CLUSTER_ROLE
    untouched = FakeCluster(serves=True, role=True, may_create=False)
    operators.ensure_api(session(untouched), ELASTICJOB, "TestX")
    assert not untouched.applied
    with pytest.raises(ConfigError, match="an administrator applies manifests/rbac.yaml"):
        operators.ensure_api(session(FakeCluster(serves=True, role=False, may_create=False)), ELASTICJOB, "TestX")
