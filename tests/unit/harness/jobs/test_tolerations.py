"""Tolerations (issue 23 item 4): every pod the suite creates tolerates the GPU and EFA taints and
TOLERATIONS' (parsed strictly); the add-ons' DaemonSets too; a DaemonSet that will not place a pod
on a selected node fails at once naming the node and the taint."""

from __future__ import annotations

import pytest

from harness.cluster.conditions import daemonset_short, tolerates
from harness.cluster.manifests import render
from harness.cluster.watch import ClusterState
from harness.errors import ConfigError
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.workload import Placement, Workload
from harness.setup.addons import ADDONS, addon_objects
from tests.unit.harness.cluster.test_rendering import LABELS
from tests.unit.harness.config.test_config import resolve_env

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
EFA_TAINT = {"key": "vpc.amazonaws.com/efa", "value": "true", "effect": "NoExecute"}
EXTRA = ({"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},)


def placement(extra=EXTRA, accelerator="nvidia") -> Placement:
    return Placement(namespace="ns", labels=LABELS, pod_annotations={}, pod_env={}, node_type="p5.48xlarge",
                     node_names=("n0", "n1"), processes_per_node=8, efa_per_node=32, accelerator=accelerator,
                     image="repo/train:1", job_timeout=600.0, extra_tolerations=extra)


def pod_specs(obj: dict) -> list[dict]:
    """Every pod template of an object: a Job's or DaemonSet's, an MPIJob's launcher and workers, what a
    TrainJob's pod template overrides set on the runtime's pods."""
    if obj["kind"] == "TrainJob":
        return [override["spec"] for override in obj["spec"]["podTemplateOverrides"]]
    if obj["kind"] == "ElasticJob":  # the worker template; DLRover's operator builds the master's
        return [obj["spec"]["replicaSpecs"]["worker"]["template"]["spec"]]
    if obj["kind"] == "MPIJob":
        return [spec["template"]["spec"] for spec in obj["spec"]["mpiReplicaSpecs"].values()]
    if obj["kind"] in ("Job", "DaemonSet", "Deployment"):
        return [obj["spec"]["template"]["spec"]]
    return []


def rendered_pod_specs(where: Placement) -> dict[str, list[dict]]:
    """Each launcher's pod specs for a workload on `where`."""
    workload = Workload("job", "workloads.bert", host_paths={"/host/etc": "/etc"})
    return {name: [spec for r in launcher.renderings(workload, where) for obj in render(r.template, r.fields)
                   for spec in pod_specs(obj)] for name, launcher in LAUNCHERS.items()}


def test_every_launchers_pods_tolerate_gpu_efa_and_configured_taints():
    specs = rendered_pod_specs(placement())
    assert set(specs) == set(LAUNCHERS) and all(specs.values())
    assert len(specs["mpi"]) == 2  # launcher and workers
    for name, pods in specs.items():
        for spec in pods:
            for taint in (GPU_TAINT, EFA_TAINT, {**GPU_TAINT, "effect": "NoExecute", "value": "x"},
                          {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}):
                assert tolerates(spec["tolerations"], taint), (name, taint, spec["tolerations"])
            assert not tolerates(spec["tolerations"], {"key": "dedicated", "value": "other", "effect": "NoSchedule"})
            assert not tolerates(spec["tolerations"], {"key": "aws.amazon.com/neuron", "effect": "NoSchedule"})


def test_cpu_runs_tolerate_the_same_taints():
    for pods in rendered_pod_specs(placement((), accelerator="cpu")).values():
        assert all(tolerates(spec["tolerations"], GPU_TAINT) for spec in pods)


def test_addon_daemonsets_tolerate_gpu_and_efa_taints_and_the_configured_ones():
    for addon in ADDONS:
        for obj in addon_objects(addon, "run", EXTRA):
            for spec in pod_specs(obj) if obj["kind"] == "DaemonSet" else []:
                for taint in (GPU_TAINT, EFA_TAINT, {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}):
                    assert tolerates(spec["tolerations"], taint), (addon.key, taint)


@pytest.mark.parametrize(("text", "pod_spec"), [
    ("", []),
    ("dedicated", [{"key": "dedicated", "operator": "Exists"}]),
    ("dedicated=ml:NoSchedule, example.com/pool=a",
     [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
      {"key": "example.com/pool", "operator": "Equal", "value": "a"}]),
    ("aws.amazon.com/neuron:NoExecute",
     [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoExecute"}]),
])
def test_tolerations_setting(text, pod_spec):
    cfg = resolve_env({"TOLERATIONS": text})
    assert cfg.tolerations.as_pod_spec() == pod_spec
    assert str(cfg.tolerations) == ",".join(part.strip() for part in text.split(","))


@pytest.mark.parametrize("text", ["dedicated:Never", "=ml", "a=b=c", "a b", "dedicated:noschedule", "-bad-:NoSchedule"])
def test_malformed_tolerations_name_the_value_and_the_syntax(text):
    with pytest.raises(ConfigError, match=r"TOLERATIONS=.* is invalid: expected comma-separated key\[=value\]"):
        resolve_env({"TOLERATIONS": text})


def node(name: str, *taints: dict) -> dict:
    return {"metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "spec": {"taints": list(taints)}}


def daemonset(desired: int, generation: int = 1, observed: int = 1) -> dict:
    return {"metadata": {"name": "check", "namespace": "ns", "generation": generation},
            "spec": {"template": {"spec": {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
                                           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired}}


def state(ds: dict, *nodes: dict) -> ClusterState:
    st = ClusterState()
    st.replace_all("DaemonSet", [ds])
    st.replace_all("Node", list(nodes))
    return st


def test_a_daemonset_short_of_the_selected_nodes_names_the_node_and_its_taint():
    cond = daemonset_short("ns", "check", ["n0", "n1"])
    nodes = (node("n0", GPU_TAINT), node("n1", GPU_TAINT, {"key": "other", "value": "x", "effect": "NoSchedule"}))
    assert cond.check(state(daemonset(2), *nodes), 0) is None
    assert cond.check(state(daemonset(1, generation=2, observed=1), *nodes), 0) is None  # not judged yet
    said = cond.check(state(daemonset(1), *nodes), 0)
    assert said == ("daemonset check places pods on 1 of the 2 selected nodes; "
                    "n1: taint other=x:NoSchedule not tolerated")
    # A cordoned node keeps its DaemonSet pods (the controller tolerates unschedulable): not the reason given.
    cordoned = node("n0", {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    assert "n0" not in cond.check(state(daemonset(1), cordoned, nodes[1]), 0)


def test_daemonset_launcher_fails_on_a_short_daemonset():
    where = placement()
    failures = LAUNCHERS["daemonset"].failed(Workload("check", "x"), where)
    assert [f.name for f in failures] == ["daemonset check to want fewer pods than the 2 selected nodes"]


def test_saved_manifests_keep_toleration_keys_readable():
    from harness.cluster.manifests import dump_objects

    specs = rendered_pod_specs(placement())
    saved = dump_objects([{"spec": spec} for spec in specs["torchrun"]])
    assert "key: nvidia.com/gpu" in saved and "key: dedicated" in saved
    assert "<redacted>" in dump_objects([{"env": [{"name": "API_KEY", "value": "s3cret"}], "apiKey": "s3cret"}])
