"""Pod resources (issue 23 item 9): every multi-process pod mounts a memory-backed /dev/shm, GPU pods
request CPU and memory (a share of the node's allocatable, not BestEffort), and HPL's CPU affinity
fits the node's CPUs."""

from __future__ import annotations

import itertools

import pytest

from harness.cluster.manifests import render
from harness.config.topology import NodeInfo, quantity
from harness.errors import TestFailure
from harness.jobs.job import smallest_allocatable
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.launchers.base import NODE_REQUEST_FRACTION
from harness.jobs.workload import Placement, Workload
from testbins.nvidia.unit import hpl_affinity
from tests.unit.harness.cluster.test_rendering import LABELS

P5 = {"cpu": "191450m", "memory": "2097152000Ki"}  # a p5.48xlarge's allocatable, less the kubelet's reserve


def placement(accelerator="nvidia", cpu=191.45, memory=2097152000 * 1024.0) -> Placement:
    return Placement(namespace="ns", labels=LABELS, pod_annotations={}, pod_env={}, node_type="p5.48xlarge",
                     node_names=("n0", "n1"), processes_per_node=8, efa_per_node=32, accelerator=accelerator,
                     image="repo/train:1", job_timeout=600.0, node_allocatable_cpu=cpu,
                     node_allocatable_memory=memory)


def pods(launcher: str, where: Placement) -> list[dict]:
    """The pod templates a launcher renders: (role, pod spec)."""
    workload = Workload("job", "workloads.bert", host_paths={"/h": "/etc"})
    specs = []
    for r in LAUNCHERS[launcher].renderings(workload, where):
        for obj in render(r.template, r.fields):
            if obj["kind"] == "MPIJob":
                specs += [(role, s["template"]["spec"]) for role, s in obj["spec"]["mpiReplicaSpecs"].items()]
            elif obj["kind"] == "ElasticJob":
                specs.append(("worker", obj["spec"]["replicaSpecs"]["worker"]["template"]["spec"]))
            elif obj["kind"] in ("Job", "DaemonSet"):
                specs.append((obj["kind"], obj["spec"]["template"]["spec"]))
    return specs


# Pods that run more than one process: torchrun's workers, mpirun's workers (sshd and the ranks),
# per-node jobs (HPL's mpirun, the GPU unit tests). Not the MPI launcher (mpirun alone) or the
# DaemonSet check (one shell).
MULTI_PROCESS = [("torchrun", "Job"), ("mpi", "Worker"), ("per-node", "Job")]


@pytest.mark.parametrize(("launcher", "role"), MULTI_PROCESS)
def test_multi_process_pods_mount_a_memory_backed_dev_shm(launcher, role):
    for kind, spec in pods(launcher, placement()):
        if kind != role:
            continue
        (container,) = spec["containers"]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm")
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["emptyDir"] == {"medium": "Memory"}


@pytest.mark.parametrize(("launcher", "role"), MULTI_PROCESS)
def test_gpu_pods_request_a_share_of_the_nodes_cpu_and_memory(launcher, role):
    for kind, spec in pods(launcher, placement()):
        if kind != role:
            continue
        requests = spec["containers"][0]["resources"]["requests"]
        assert quantity(requests["cpu"]) == pytest.approx(191.45 * NODE_REQUEST_FRACTION, abs=1e-3)
        assert quantity(requests["memory"]) == pytest.approx(2097152000 * 1024 * NODE_REQUEST_FRACTION, rel=1e-9)
        assert 0 < NODE_REQUEST_FRACTION < 1  # some of the node is left to its DaemonSets


def test_cpu_runs_and_unknown_nodes_request_no_share():
    for _, spec in pods("torchrun", placement("cpu")):
        assert spec["containers"][0]["resources"] == {"requests": {"cpu": "8"}}
    for _, spec in pods("per-node", placement(cpu=0.0, memory=0.0)):
        assert spec["containers"][0]["resources"]["requests"] == {}


def test_node_info_reads_capacity_cpus_and_allocatable():
    node = {"metadata": {"name": "n0", "labels": {}}, "status": {"capacity": {"cpu": "192", "nvidia.com/gpu": "8"},
                                                                  "allocatable": P5, "conditions": []}}
    info = NodeInfo.from_node(node)
    assert (info.cpus, info.allocatable_cpu, info.allocatable_memory) == (192, 191.45, 2097152000 * 1024)
    smaller = NodeInfo("n1", "p5", 8, 0, True, 192, 100.0, 1e9)
    assert smallest_allocatable([info, smaller], ["n0", "n1"]) == {"node_allocatable_cpu": 100.0,
                                                                   "node_allocatable_memory": 1e9}
    assert smallest_allocatable([info, smaller], ["n0"])["node_allocatable_cpu"] == 191.45


@pytest.mark.parametrize(("gpus", "cpus"), [(8, 96), (8, 112), (8, 192), (8, 64), (4, 48), (1, 8)])
def test_hpl_cpu_affinity_fits_the_nodes_cpus(gpus, cpus):
    mem, cpu = hpl_affinity(gpus, cpus)
    ranges = [tuple(map(int, part.split("-"))) for part in cpu.split(":")]
    assert len(ranges) == gpus == len(mem.split(":"))
    assert ranges[0][0] == 0 and max(end for _, end in ranges) < cpus  # every CPU named exists
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))  # disjoint, contiguous
    assert max(end for _, end in ranges) >= cpus - gpus  # and hardly any is left idle


def test_hpl_affinity_keeps_upstreams_on_112_cpus_and_refuses_too_few():
    assert hpl_affinity(8, 112) == ("0:0:0:0:1:1:1:1", "0-13:14-27:28-41:42-55:56-69:70-83:84-97:98-111")
    with pytest.raises(TestFailure, match="8 HPL ranks a CPU each on a node with 4 CPUs"):
        hpl_affinity(8, 4)
