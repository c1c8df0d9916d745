"""First contact with GPU nodes, on the local cluster's kwok GPU nodes (`hack/local-cluster nodes
--shape p5`) whose pods, without a canned-log annotation, run as host processes with no GPU: what a
real node with a broken driver looks like to the workloads.

- ACCELERATOR=nvidia TestNanoGPTTraining fails fast naming CUDA, the pod and the node (it used to
  train on the CPU until the job timeout).
- NODE_COUNT=1 on 2 nodes runs on the node discovery chose, even when the scheduler would rather
  use the other one (a pod fills most of the chosen node's CPUs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from ..conftest import DEFAULT_CANNED_LOG, INJECT, LocalCluster
from ..kubetest2_runs import CANNED_LOG_ANNOTATION, case_properties, junit_cases, kubetest2

pytestmark = pytest.mark.integration

FAST_SECONDS = 300  # the pods' start on a loaded 2-core host, then the workloads' first check


def test_nvidia_training_on_nodes_without_cuda_fails_fast_naming_cuda(default_nodes: LocalCluster, tmp_path: Path):
    default_nodes.set_nodes("p5", 2)
    artifacts = tmp_path / "artifacts"
    started = time.monotonic()
    done = kubetest2(default_nodes, artifacts, "exec", "e2e-nvidia-training", "--test.v",
                     "--test.run=TestNanoGPTTraining",
                     canned=False, timeout=1200,
                     env={"ACCELERATOR": "nvidia", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "15m"})
    seconds = time.monotonic() - started
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode != 0, output
    assert (artifacts / "junit_e2e-nvidia-training.xml").exists(), output
    case = junit_cases(artifacts, "e2e-nvidia-training")["TestNanoGPTTraining"]
    failure = next(iter(case.result), None)
    assert failure is not None, output
    message = failure.message or ""
    assert "no usable GPU" in message and "CUDA is required" in message, message
    assert "pod nanogpt-training-" in message and "on node kwok-p5-" in message, message
    assert seconds < FAST_SECONDS, f"took {seconds:.0f}s: {message}"
    assert "rank.0.device" not in case_properties(case)  # no rank trained


def test_node_count_1_runs_on_the_chosen_node_only(default_nodes: LocalCluster, namespace: str, tmp_path: Path):
    # Discovery chooses the first Ready node by name (kwok-cpu-0); a pod holding 12 of its 16 CPUs
    # makes the scheduler's scoring prefer kwok-cpu-1 for a pod that is not pinned.
    chosen, other = "kwok-cpu-0", "kwok-cpu-1"
    filler = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "filler", "annotations": {INJECT + "canned-log": DEFAULT_CANNED_LOG}},
              "spec": {"nodeName": chosen, "containers": [{"name": "c", "image": "filler:1", "command": ["true"],
                                                           "resources": {"requests": {"cpu": "12"}}}]}}
    default_nodes.core.create_namespaced_pod(namespace, filler)
    artifacts = tmp_path / "artifacts"
    done = kubetest2(default_nodes, artifacts, "exec", "e2e-nvidia-training", "--test.v",
                     "--test.run=TestMNISTTraining", canned=False, timeout=900,
                     env={"NODE_COUNT": "1", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m"})
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert (artifacts / "junit_e2e-nvidia-training.xml").exists(), output
    case = junit_cases(artifacts, "e2e-nvidia-training")["TestMNISTTraining"]
    props = case_properties(case)
    assert props.get("rank.0.node") == chosen, f"rank 0 ran on {props.get('rank.0.node')}, not {chosen}: {output}"
    assert not any(value == other for key, value in props.items() if key.endswith(".node")), props
    assert done.returncode == 0, output


def test_bert_training_image_alone_runs_bert_on_mpirun_in_that_image(default_nodes: LocalCluster, tmp_path: Path):
    # The host-process nodes have the workloads package, so the pod program's check finds it and
    # runs ours; the fallback to the image's `python train.py` is run in tests/unit/harness/jobs/test_bert_image.py.
    image = "registry.example/upstream/nvidia-training:v1"
    artifacts = tmp_path / "artifacts"
    done = kubetest2(default_nodes, artifacts, "exec", "e2e-nvidia-training", "--test.v",
                     "--test.run=^(TestBertTraining|TestMNISTTraining)$", f"--bertTrainingImage={image}",
                     canned=False, timeout=900, env={"WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m"})
    output = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, output
    cases = junit_cases(artifacts, "e2e-nvidia-training")
    bert = artifacts / "e2e-nvidia-training" / "TestBertTraining" / "manifests" / "mpijob.yaml"
    assert bert.exists(), output  # upstream's launcher, with no LAUNCHER given
    (mpijob,) = yaml.safe_load_all(bert.read_text())
    specs = mpijob["spec"]["mpiReplicaSpecs"]
    assert {specs[role]["template"]["spec"]["containers"][0]["image"] for role in ("Launcher", "Worker")} == {image}
    command = specs["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert "find_spec('workloads.bert')" in command[command.index("sh") + 2], command
    assert case_properties(cases["TestBertTraining"])["rank.1.launcher"] == "openmpi"
    mnist = (artifacts / "e2e-nvidia-training" / "TestMNISTTraining" / "manifests" / "torchrun-job.yaml").read_text()
    assert image not in mnist and "kubetest2-training/workloads:" in mnist  # TRAINING_IMAGE for the others


def test_nccl_allreduce_with_efa_fails_on_the_socket_fallback_naming_the_nodes(default_nodes: LocalCluster,
                                                                                tmp_path: Path):
    default_nodes.set_nodes("gpu", 2, efa=4)  # EFA requested: the nodes' allocatable
    outcomes = {}
    for variant, canned in (("efa", "allreduce-16gpus"), ("socket", "allreduce-16gpus-socket")):
        artifacts = tmp_path / variant
        # upstream's meaning: the path is judged only with --efaEnabled=true
        done = kubetest2(default_nodes, artifacts, "exec", "e2e-nvidia", "--test.run=TestNCCLAllReduce",
                         "--efaEnabled=true",
                         env={"ACCELERATOR": "nvidia", "NCCL_TESTS_MIN_BW": "50",
                              "POD_ANNOTATIONS": f"{CANNED_LOG_ANNOTATION}={canned}"})
        output = done.stdout[-4000:] + done.stderr[-4000:]
        assert (artifacts / "junit_e2e-nvidia.xml").exists(), output
        rendered = (artifacts / "e2e-nvidia" / "TestNCCLAllReduce" / "manifests" / "torchrun-job.yaml").read_text()
        assert "name: NCCL_DEBUG" in rendered and "value: INFO" in rendered  # set for the check
        outcomes[variant] = (done.returncode, junit_cases(artifacts, "e2e-nvidia")["TestNCCLAllReduce"], output)
    code, case, output = outcomes["efa"]
    assert code == 0 and case.is_passed, output
    assert case_properties(case)["check.efa.nccl_net"].startswith("pass"), case_properties(case)
    code, case, output = outcomes["socket"]
    (failure,) = case.result
    assert code != 0 and "NCCL used its socket transport (NET/Socket), not EFA" in (failure.message or ""), output
    assert "on node kwok-gpu-0" in failure.message and "on node kwok-gpu-1" in failure.message
