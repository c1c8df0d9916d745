"""What users hit at scale, through the test binary against the local cluster's API server:

- a job larger than the node type (more GPUs per node than it has, more nodes than there are) is a
  configuration error (exit 2) before anything is created, within seconds;
- partial scheduling: some pods Pending for lack of GPUs past POD_FAILURE_GRACE fails the test
  fast, saying how many are pending and the scheduler's reason;
- two runs at once on one cluster (different KUBETEST2_RUN_ID) stay apart: their own namespaces
  and run-id labels, their own pods' metrics in their verdicts, and one's cleanup leaves the other
  running.

Pods here are canned (localcluster/emulation/canned_logs/, one generated log per pod through the `{index}` name).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from ..conftest import INJECT, REPO, LocalCluster, wait_for, watch_pods

pytestmark = pytest.mark.integration

BINARY = "e2e-nvidia-training"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
CANNED_LOGS = REPO / "localcluster" / "emulation" / "canned_logs"
RUN_ID_LABEL = "kubetest2-training/run-id"


def canned_training_logs(prefix: str, pods: int, ranks_per_pod: int, throughput: float) -> list[Path]:
    """localcluster/emulation/canned_logs/<prefix>-<i>.log: pod i's ranks report a falling loss and `throughput`."""
    paths = []
    world_size = pods * ranks_per_pod
    for pod in range(pods):
        lines = []
        for rank in range(pod * ranks_per_pod, (pod + 1) * ranks_per_pod):
            record = {"workload": "bert", "rank": rank, "world_size": world_size, "throughput": throughput,
                      "loss_first": 10.4, "loss_last": 7.1, "params_checksum": 1.5, "steps_requested": 10,
                      "steps_completed": 10, "probe_matmul_tflops": 250.0, "probe_matmul_dtype": "bfloat16",
                      "probe_seconds": 2.0}  # every key the verdict checks (workloads/README.md)
            lines.append("KT2T_METRICS " + json.dumps(record))
        path = CANNED_LOGS / f"{prefix}-{pod}.log"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


@dataclass
class Run:
    """One run of the test binary: its run id, artifacts and (once ended) exit code and output."""

    run_id: str
    artifacts: Path
    process: subprocess.Popen[str]
    started: float
    output: str = ""
    rc: int | None = None
    elapsed: float = 0.0

    def wait(self, timeout: float = 300) -> Run:
        self.output, _ = self.process.communicate(timeout=timeout)
        self.rc, self.elapsed = self.process.returncode, time.monotonic() - self.started
        return self

    def case(self, name: str = "TestBertTraining") -> ET.Element:
        root = ET.parse(self.artifacts / f"junit_{BINARY}.xml").getroot()
        found = next((c for c in root.iter("testcase") if c.get("name") == name), None)
        assert found is not None, f"no testcase {name} in the JUnit of run {self.run_id}:\n{self.output}"
        return found

    def properties(self) -> dict[str, str]:
        return {p.get("name", ""): p.get("value", "") for p in self.case().iter("property")}

    def failure_message(self, name: str = "TestBertTraining") -> str:
        element = self.case(name).find("failure")
        return "" if element is None else element.get("message") or ""


def start_run(cluster: LocalCluster, tmp_path: Path, env: dict[str, str]) -> Run:
    """The binary with TestBertTraining selected and a fresh KUBETEST2_RUN_ID."""
    run_id = f"it{uuid.uuid4().hex[:6]}"
    artifacts = tmp_path / run_id
    full_env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "KUBECONFIG": str(cluster.kubeconfig),
                "ARTIFACTS": str(artifacts), "KUBETEST2_RUN_ID": run_id, "JOB_TIMEOUT": "3m", **env}
    process = subprocess.Popen([str(VENV_BIN / BINARY), "--test.run=^TestBertTraining$", "--test.v"],
                               env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return Run(run_id, artifacts, process, time.monotonic())


def namespaces_of(cluster: LocalCluster, run_id: str) -> list[str]:
    return [ns.metadata.name for ns in cluster.core.list_namespace(label_selector=f"{RUN_ID_LABEL}={run_id}").items]


@pytest.fixture
def gpu_nodes(default_nodes: LocalCluster) -> Iterator[LocalCluster]:
    """3 GPU nodes (p4d.24xlarge, 8 GPUs each); the default nodes come back afterwards."""
    default_nodes.set_nodes("gpu", 3)
    yield default_nodes


@pytest.fixture
def logs_removed() -> Iterator[list[Path]]:
    """Canned logs a test writes, removed at its end."""
    written: list[Path] = []
    yield written
    for path in written:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize(("env", "expected"), [
    ({"GPUS_PER_NODE": "16"}, "GPUS_PER_NODE=16 but the p4d.24xlarge nodes have at most 8 nvidia.com/gpu each"),
    ({"NODE_COUNT": "4"}, "NODE_COUNT=4 but only 3 Ready p4d.24xlarge nodes"),
])
def test_a_job_larger_than_the_node_type_is_a_configuration_error_before_anything_is_created(
        gpu_nodes: LocalCluster, tmp_path: Path, env: dict[str, str], expected: str):
    # DISCOVERY_TIMEOUT is long: an answer within seconds proves discovery did not wait for GPUs.
    run = start_run(gpu_nodes, tmp_path, {"DISCOVERY_TIMEOUT": "2m", **env}).wait()
    assert run.rc == 2, run.output
    assert expected in run.output
    # Well inside DISCOVERY_TIMEOUT (2 min): the whole binary's run, on a host whose speed varies,
    # with room (was 30 s), and still half of what a discovery that waited would take.
    assert run.elapsed < 60, f"took {run.elapsed:.0f}s: discovery waited instead of refusing"
    error = run.case("Configuration").find("error")
    assert error is not None and expected in (error.get("message") or "")
    assert namespaces_of(gpu_nodes, run.run_id) == []  # nothing was created


def squat_gpus(cluster: LocalCluster, namespace: str, node: str) -> None:
    """A pod of someone else's holding all 8 GPUs of `node` (pinned there, canned, runs until deleted)."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="gpu-squatter", annotations={f"{INJECT}canned-log": "bert-mpirun-32ranks"}),
        spec=client.V1PodSpec(node_name=node, tolerations=[client.V1Toleration(operator="Exists")], containers=[
            client.V1Container(name="c", image="registry.invalid/squatter:1",
                               resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "8"}))]))
    cluster.core.create_namespaced_pod(namespace, pod)
    watch_pods(cluster.core, namespace, lambda p: p.status.phase == "Running", 60, "the squatter running")


def test_partial_scheduling_fails_after_the_grace_saying_how_many_pods_are_pending_and_why(
        gpu_nodes: LocalCluster, namespace: str, tmp_path: Path, logs_removed: list[Path]):
    squat_gpus(gpu_nodes, namespace, "kwok-gpu-2")
    logs_removed += canned_training_logs("it-partial", 3, 8, 200.0)
    annotations = f"{INJECT}canned-log-worker=it-partial-{{index}},{INJECT}run-duration=2m"
    run = start_run(gpu_nodes, tmp_path, {"POD_FAILURE_GRACE": "5s", "POD_ANNOTATIONS": annotations}).wait()
    assert run.rc == 1, run.output
    message = run.failure_message()
    assert message.startswith("1 of 3 pods Pending, unschedulable past POD_FAILURE_GRACE (5s): pod bert-training-"), \
        message
    assert "Insufficient nvidia.com/gpu" in message
    # Fast: the grace and the capture, not the 2-minute pods or the 3-minute JOB_TIMEOUT.
    assert run.elapsed < 90, f"took {run.elapsed:.0f}s"
    wait_for(lambda: not namespaces_of(gpu_nodes, run.run_id), 120, f"run {run.run_id}'s namespace gone")


def test_two_runs_at_once_stay_apart(default_nodes: LocalCluster, tmp_path: Path, logs_removed: list[Path]):
    cluster = default_nodes  # 2 CPU nodes: both runs fit (a CPU per pod)
    logs_removed += canned_training_logs("it-apart-a", 2, 1, 100.0)
    logs_removed += canned_training_logs("it-apart-b", 2, 1, 300.0)
    base = {"ACCELERATOR": "cpu", "NODE_COUNT": "2"}
    short = start_run(cluster, tmp_path, {**base, "POD_ANNOTATIONS":
                                          f"{INJECT}canned-log-worker=it-apart-a-{{index}},{INJECT}run-duration=2s"})
    long = start_run(cluster, tmp_path, {**base, "POD_ANNOTATIONS":
                                         f"{INJECT}canned-log-worker=it-apart-b-{{index}},{INJECT}run-duration=40s"})
    short.wait()
    # The short run has ended and cleaned up; the long one's pods still run, under its own labels.
    assert long.process.poll() is None, f"the long run ended first:\n{long.wait().output}"
    (long_namespace,) = namespaces_of(cluster, long.run_id)
    assert long.run_id in long_namespace
    pods = cluster.core.list_namespaced_pod(long_namespace).items
    assert len(pods) == 2 and all(p.metadata.labels[RUN_ID_LABEL] == long.run_id for p in pods)
    assert all(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods)
    long.wait()
    for run, throughput in ((short, 100.0), (long, 300.0)):
        assert run.rc == 0, run.output
        props = run.properties()
        assert props["metrics.ranks"] == "2"  # its own two pods' ranks, not the other run's
        assert float(props["metrics.throughput.median"]) == throughput
        assert run.run_id in launched_namespace(run)
        wait_for(lambda r=run: not namespaces_of(cluster, r.run_id), 120, f"run {run.run_id}'s namespace gone")
    assert launched_namespace(long) == long_namespace != launched_namespace(short)


def launched_namespace(run: Run) -> str:
    """The namespace the run's job went in, from its `launched ... in namespace <ns>` line."""
    match = re.search(r"launched bert-training .* in namespace (\S+)", run.output)
    assert match, run.output
    return match.group(1)
