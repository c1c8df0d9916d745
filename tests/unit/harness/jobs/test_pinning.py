"""Every launcher pins the pods that do work to the nodes discovery chose (Placement.node_names):
by nodeName (per-node) or a required nodeAffinity on the node names (base.node_affinity), so the
NotReady watch, which watches those nodes, watches the nodes the pods are on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.manifests import render
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.launchers.base import node_affinity
from harness.jobs.workload import Placement, Workload

CHOSEN = ("kwok-p5-1",)  # NODE_COUNT=1 on a 2-node cluster: discovery chose one of them


def placement(nodes: tuple[str, ...] = CHOSEN) -> Placement:
    return Placement(namespace="ns", labels={MANAGED_BY_LABEL: MANAGED_BY, "kubetest2-training/job": "j"},
                     pod_annotations={}, pod_env={},
                     node_type="p5.48xlarge", node_names=nodes, processes_per_node=8, efa_per_node=0,
                     accelerator="nvidia", image="repo/train:1", job_timeout=600.0)


def pod_specs(obj: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, spec) of every pod template in a rendered object."""
    if isinstance(obj, dict):
        if "containers" in obj:
            yield path, obj
        for key, value in obj.items():
            yield from pod_specs(value, f"{path}/{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from pod_specs(value, f"{path}/{i}")


def nodes_allowed(spec: dict[str, Any]) -> set[str] | None:
    """The node names a pod may run on, None when any node of the type will do."""
    if "nodeName" in spec:
        return {spec["nodeName"]}
    required = (spec.get("affinity", {}).get("nodeAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution", {}))
    allowed = None
    for term in required.get("nodeSelectorTerms", []):
        for match in term.get("matchFields", []):
            if match["key"] == "metadata.name" and match["operator"] == "In":
                allowed = (allowed or set()) | set(match["values"])
    return allowed


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_every_pod_that_does_work_runs_only_on_the_chosen_nodes(launcher: str):
    workload = Workload("j", "workloads.nanogpt")
    rendered = [obj for r in LAUNCHERS[launcher].renderings(workload, placement())
                for obj in render(r.template, r.fields)]
    specs = [(f"{obj['kind']}{where}", spec) for obj in rendered for where, spec in pod_specs(obj)]
    assert specs, f"{launcher} rendered no pod template"
    for where, spec in specs:
        # mpirun's pod and DLRover's master only launch: they ask for no GPU and may run anywhere (the
        # master's pod is DLRover's operator's: only its image is the template's).
        if "/Launcher/" in where or "/dlrover-master/" in where:
            continue
        assert nodes_allowed(spec) == set(CHOSEN), f"{launcher}: {where} is not pinned to {CHOSEN}: {spec}"


def test_node_affinity_names_every_chosen_node_and_refuses_none():
    affinity = node_affinity(placement(("a", "b")))
    # One term per node: the API allows one value for a `metadata.name` field selector (HTTP 422 else).
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]
    with pytest.raises(ValueError, match="no node names"):
        node_affinity(placement(()))
