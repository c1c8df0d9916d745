"""Strict template rendering and the shipped templates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cluster.labels import MANAGED_BY_LABEL
from harness.cluster.manifests import PLACEHOLDER, TEMPLATE_FIELDS, render, render_text, save
from harness.config.settings import NCCL_TESTS_IMAGE
from harness.errors import RenderError
from harness.jobs.launchers.base import security_context
from harness.jobs.launchers.per_node import SHM_MOUNT, SHM_VOLUME

REPO = Path(__file__).resolve().parents[4]

TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
LABELS = {MANAGED_BY_LABEL: "kubetest2-training", "kubetest2-training/run-id": "r1"}
PINNED = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}}
# A container of this project's image: every capability dropped.
DROPPED = security_context(NCCL_TESTS_IMAGE)


def torchrun_fields(**overrides):
    fields = {
        "JobName": "bert-training", "Namespace": "ns", "Labels": LABELS, "PodAnnotations": {},
        "Image": "img:1", "ImagePullPolicy": "IfNotPresent",
        "WorkerReplicas": 4, "Resources": {"limits": {"nvidia.com/gpu": 8}},
        "NodeSelector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"}, "NodeAffinity": PINNED,
        "Command": ["torchrun"],
        "Args": ["--nnodes=4", "-m", "workloads.bert"], "Env": [{"name": "NUM_GPUS_PER_NODE", "value": "8"}],
        "MasterPort": 29500, "BackoffLimit": 0, "ActiveDeadlineSeconds": 1260,
              "Tolerations": TOLERATIONS, "SecurityContext": DROPPED,
    }
    fields.update(overrides)
    return fields


def test_unknown_field_names_template_and_field():
    with pytest.raises(RenderError, match=r"render bert-training.yaml: unknown field \.GpuPerNod"):
        render_text("bert-training.yaml", "x: {{.GpuPerNod}}", {})


def test_missing_field_names_it():
    with pytest.raises(RenderError, match=r"missing field \.SlotsPerWorker"):
        render_text("t.yaml", "np: {{.SlotsPerWorker}}", {})


def test_values_cannot_break_yaml():
    text = render_text("t.yaml", "image: {{.Image}}", {"Image": "a: b\n- c"})
    assert text == 'image: "a: b\\n- c"'


def test_torchrun_template_renders_indexed_job_and_headless_service(tmp_path):
    objects = render("torchrun-job.yaml", torchrun_fields())
    save(tmp_path, "torchrun-job.yaml", objects)
    service, job = objects
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == 4
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert job["spec"]["template"]["spec"]["subdomain"] == "bert-training"
    assert (tmp_path / "torchrun-job.yaml").read_text().count("bert-training") >= 3
    for obj in objects:
        assert obj["metadata"]["labels"][MANAGED_BY_LABEL] == "kubetest2-training"


def trainjob_fields(**overrides):
    fields = {"JobName": "tj", "Namespace": "ns", "Labels": LABELS, "PodAnnotations": {"a": "b"},
              "Image": "img:1", "ImagePullPolicy": "IfNotPresent",
              "WorkerReplicas": 2, "SlotsPerWorker": 1, "Resources": {"requests": {"cpu": "1"}},
              "NodeSelector": {"node.kubernetes.io/instance-type": "kwok-cpu"}, "Command": ["torchrun"],
              "Args": ["-m", "workloads.allreduce"], "Env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
              "RuntimeKind": "ClusterTrainingRuntime", "RuntimeName": "torch-distributed",
              "Volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
              "VolumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}], "Tolerations": TOLERATIONS,
              "NodeAffinity": PINNED}
    fields.update(overrides)
    return fields


def test_trainjob_template_sets_the_trainer_and_references_the_runtime():
    (trainjob,) = render("trainjob.yaml", trainjob_fields())
    assert (trainjob["apiVersion"], trainjob["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    spec = trainjob["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-distributed"}
    assert spec["trainer"] == {"image": "img:1", "command": ["torchrun"], "args": ["-m", "workloads.allreduce"],
                               "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}], "numNodes": 2,
                               "numProcPerNode": 1, "resourcesPerNode": {"requests": {"cpu": "1"}}}
    assert spec["labels"] == LABELS  # the JobSet's and its Jobs'
    (override,) = spec["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]  # the runtime's replicated job
    assert override["metadata"] == {"labels": LABELS, "annotations": {"a": "b"}}
    assert override["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "kwok-cpu"}
    assert override["spec"]["tolerations"] == TOLERATIONS
    assert override["spec"]["affinity"]["nodeAffinity"] == PINNED
    assert override["spec"]["containers"][0]["name"] == "node"


def test_mpijob_template():
    fields = torchrun_fields(SlotsPerWorker=8, LauncherCommand=["mpirun", "-np", "32"], BackoffLimit=1,
                             LauncherEnv=[{"name": "MASTER_PORT", "value": "29500"}], WorkerSecurityContext=DROPPED)
    for key in ("Command", "Args", "MasterPort", "ActiveDeadlineSeconds", "Env"):
        fields.pop(key)
    (mpijob,) = render("mpijob.yaml", fields)
    assert mpijob["kind"] == "MPIJob" and mpijob["apiVersion"] == "kubeflow.org/v2beta1"
    assert mpijob["spec"]["slotsPerWorker"] == 8
    assert mpijob["spec"]["runPolicy"]["backoffLimit"] == 1
    assert mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4


def test_missing_label_is_refused(tmp_path):
    with pytest.raises(RenderError, match="lacks the label"):
        render("torchrun-job.yaml", torchrun_fields(Labels={"a": "b"}))


def test_saved_manifests_redact_secret_env(tmp_path):
    env = [{"name": "HF_TOKEN", "value": "hf_abc"}, {"name": "NUM_GPUS_PER_NODE", "value": "8"}]
    objects = render("torchrun-job.yaml", torchrun_fields(Env=env))
    save(tmp_path, "torchrun-job.yaml", objects)
    saved = (tmp_path / "torchrun-job.yaml").read_text()
    assert "hf_abc" not in saved and "<redacted>" in saved and "NUM_GPUS_PER_NODE" in saved
    # What is applied keeps the real value.
    container = objects[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0]["value"] == "hf_abc"


def test_every_declared_field_is_used_by_a_template():
    used = {m["field"] for path in (REPO / "manifests").glob("*.yaml") for m in PLACEHOLDER.finditer(path.read_text())}
    assert used == set(TEMPLATE_FIELDS), f"declared but unused: {set(TEMPLATE_FIELDS) - used}"


def test_per_node_template_pins_the_pod_and_asks_for_the_gpus():
    fields = {"JobName": "gpu-capacity-n1", "Namespace": "ns", "Labels": LABELS, "PodAnnotations": {},
              "Image": "img:1", "ImagePullPolicy": "IfNotPresent",
              "NodeName": "n1", "GPUPerNode": 8, "SecurityContext": DROPPED,
              "Requests": {"cpu": "48", "memory": "64Gi"}, "Command": ["nvidia-smi", "-L"],
              "Env": [{"name": "EC2_INSTANCE_TYPE", "value": "p5.48xlarge"}],
              "Tolerations": TOLERATIONS, "ActiveDeadlineSeconds": 960,
              "VolumeMounts": [SHM_MOUNT, {"name": "host-0", "mountPath": "/host/proc", "readOnly": True}],
              "Volumes": [SHM_VOLUME, {"name": "host-0", "hostPath": {"path": "/proc"}}]}
    (job,) = render("per-node-job.yaml", fields)
    assert job["spec"]["activeDeadlineSeconds"] == 960
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "n1" and pod["containers"][0]["command"] == ["nvidia-smi", "-L"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert pod["containers"][0]["env"] == [{"name": "EC2_INSTANCE_TYPE", "value": "p5.48xlarge"}]
    assert re.fullmatch(r"[a-z0-9-]+", job["metadata"]["name"])
    assert pod["containers"][0]["volumeMounts"][1] == {"name": "host-0", "mountPath": "/host/proc", "readOnly": True}
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                              {"name": "host-0", "hostPath": {"path": "/proc"}}]


def test_daemonset_template_mounts_host_folders_read_only_on_the_node_type():
    fields = {"JobName": "containerd-check", "Namespace": "ns", "Labels": LABELS, "PodAnnotations": {},
              "Image": "img:1", "ImagePullPolicy": "IfNotPresent", "Command": ["sh", "-c", "true"], "Env": [],
              "NodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}, "NodeAffinity": PINNED,
              "VolumeMounts": [{"name": "host-0", "mountPath": "/host-etc/containerd", "readOnly": True}],
              "Volumes": [{"name": "host-0", "hostPath": {"path": "/etc/containerd"}}],
              "Tolerations": TOLERATIONS, "SecurityContext": DROPPED}
    (daemonset,) = render("daemonset.yaml", fields)
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["spec"]["selector"]["matchLabels"] == daemonset["spec"]["template"]["metadata"]["labels"]
    assert pod["volumes"][0]["hostPath"]["path"] == "/etc/containerd"
    assert pod["containers"][0]["volumeMounts"][0]["readOnly"] is True
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
