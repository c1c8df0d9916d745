"""The node agent's view of a container (localcluster/hostnodes/container_env.py, loopback_names.py,
volumes.py): `$(VAR)` expansion with the kubelet's rules, field refs, the loopback rewriting of
cluster names and ports, and container paths mapped into the pod's scratch folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.hostnodes.container_env import ContainerConfigError, expand, field_value
from localcluster.hostnodes.loopback_names import LoopbackNames, PortAllocator
from localcluster.hostnodes.volumes import PathMap, projected_files

VARS = {"A": "1", "B": "two"}


@pytest.mark.parametrize(("text", "expected"), [
    ("$(A)-$(B)", "1-two"),
    ("$(UNDEFINED)", "$(UNDEFINED)"),
    ("$$(A)", "$(A)"),
    ("$$", "$"),
    ("cost $5", "cost $5"),
    ("$(A", "$(A"),
    ("end$", "end$"),
    ("", ""),
])
def test_expand_follows_the_kubelet(text: str, expected: str):
    assert expand(text, VARS.get) == expected


POD = {
    "metadata": {"name": "w-0-abc", "namespace": "ns", "uid": "u1",
                 "annotations": {"batch.kubernetes.io/job-completion-index": "0"}, "labels": {"app": "x"}},
    "spec": {"nodeName": "kwok-cpu-0"},
}


def test_field_refs():
    assert field_value(POD, "metadata.annotations['batch.kubernetes.io/job-completion-index']") == "0"
    assert field_value(POD, "metadata.labels['app']") == "x"
    assert field_value(POD, "spec.nodeName") == "kwok-cpu-0"
    assert field_value(POD, "status.podIP") == "127.0.0.1"
    with pytest.raises(ContainerConfigError):
        field_value(POD, "spec.nope")


def names(hostname: str, ports: PortAllocator | None = None) -> LoopbackNames:
    return LoopbackNames("ns", {"job"}, "job", hostname, ports or PortAllocator())


def test_cluster_names_become_loopback_and_others_stay():
    n = names("job-0")
    assert n.env_value("MASTER_ADDR", "job-0.job") == "127.0.0.1"
    assert n.env_value("MASTER_ADDR", "job") == "127.0.0.1"
    assert n.env_value("URL", "http://job-1.job.ns.svc.cluster.local:80/x") == "http://127.0.0.1:80/x"
    assert n.env_value("URL", "job.ns.svc") == "127.0.0.1"
    assert n.env_value("OTHER", "job-0.other") == "job-0.other"  # not a Service of this namespace
    assert n.env_value("OTHER", "job-0.job.otherns") == "job-0.job.otherns"
    assert n.argv(["x", "--rdzv-id=job", "job"]) == ["x", "--rdzv-id=job", "job"]  # bare names stay


def test_ports_are_per_job_and_shared_by_its_pods():
    ports = PortAllocator()
    first, second = names("job-0", ports), names("job-1", ports)
    port = first.env_value("MASTER_PORT", "29500")
    assert port != "29500" and second.env_value("MASTER_PORT", "29500") == port
    other = LoopbackNames("ns", {"other"}, "other", "other-0", ports).env_value("MASTER_PORT", "29500")
    assert other != port
    assert first.argv(["torchrun", "--master-port=29500", "--master_port", "29500"]) == [
        "torchrun", f"--master-port={port}", "--master_port", port]


def test_trainjob_pet_variables_reach_worker_0_on_the_jobs_own_port():
    # Kubeflow Trainer's torch plugin: PET_MASTER_ADDR=<job>-node-0-0.<job>, PET_MASTER_PORT=29500,
    # read by torchrun; JobSet's pods have the job's name as subdomain.
    ports = PortAllocator()
    worker0 = LoopbackNames("ns", {"tj"}, "tj", "tj-node-0-0", ports)
    worker1 = LoopbackNames("ns", {"tj"}, "tj", "tj-node-0-1", ports)
    assert worker1.env_value("PET_MASTER_ADDR", "tj-node-0-0.tj") == "127.0.0.1"
    port = worker0.env_value("PET_MASTER_PORT", "29500")
    assert port != "29500" and worker1.env_value("PET_MASTER_PORT", "29500") == port
    assert worker0.env_value("MASTER_PORT", "29500") == port  # one job, one rendezvous port
    assert worker0.env_value("PET_NNODES", "2") == "2"


def test_static_torchrun_arguments():
    argv = names("job-1").argv(["torchrun", "--nnodes=2", "--master-addr=job-0.job", "--master-port=29500",
                                "-m", "workloads.bert"])
    assert argv[2] == "--master-addr=127.0.0.1"
    assert argv[3].startswith("--master-port=") and argv[3] != "--master-port=29500"
    assert argv[4:] == ["-m", "workloads.bert"]


def test_rdzv_endpoint_gets_one_port_for_every_pod_and_nothing_else():
    """Which pod hosts the store is the launcher's to say (--rdzv-conf=is_host, as on a real cluster),
    not the stand-in's: the arguments keep their shape."""
    ports = PortAllocator()
    host = names("job-0", ports).argv(["torchrun", "--rdzv-endpoint=job-0.job:29500", "-m", "w"])
    guest = names("job-1", ports).argv(["torchrun", "--rdzv-endpoint=job-0.job:29500", "-m", "w"])
    port = host[1].rsplit(":", 1)[1]
    assert host == guest == ["torchrun", f"--rdzv-endpoint=127.0.0.1:{port}", "-m", "w"]
    entry = names("job-1", ports).argv(["sh", "-c", 'exec torchrun "$@"', "torchrun", "--rdzv-conf=is_host=false",
                                        "--rdzv-endpoint=job-0.job:29500"])
    assert entry == ["sh", "-c", 'exec torchrun "$@"', "torchrun", "--rdzv-conf=is_host=false",
                     f"--rdzv-endpoint=127.0.0.1:{port}"]


def test_mpirun_host_lists_keep_their_names():
    """The ssh stand-in maps them to pods; 127.0.0.1 would name no pod."""
    argv = ["mpirun", "-H", "job-0.job.ns.svc,job-1.job.ns.svc", "--host=job-0.job", "-x", "A=job-0.job", "p"]
    assert names("l").argv(argv) == [
        "mpirun", "-H", "job-0.job.ns.svc,job-1.job.ns.svc", "--host=job-0.job", "-x", "A=127.0.0.1", "p"]


def test_container_paths_map_into_the_scratch_folder():
    paths = PathMap((("/tmp", Path("/s/tmp")), ("/etc/mpi", Path("/s/volumes/cfg")),
                     ("/etc/mpi/keys", Path("/s/volumes/keys"))))
    assert paths.rewrite("/etc/mpi/hostfile") == "/s/volumes/cfg/hostfile"
    assert paths.rewrite("/etc/mpi/keys/id") == "/s/volumes/keys/id"  # the longest prefix wins
    assert paths.rewrite("--hostfile=/etc/mpi/hostfile") == "--hostfile=/s/volumes/cfg/hostfile"
    assert paths.rewrite("/tmp") == "/s/tmp"
    assert paths.rewrite("/etc/mpiother") == "/etc/mpiother"
    assert paths.rewrite("x=/tmp/a") == "x=/tmp/a"  # only flags' values


def test_volume_items_and_modes_as_mpi_operator_asks():
    """The launcher's ConfigMap volume: hostfile 0444, discover_hosts.sh 0555, items only."""
    source = {"name": "job-config", "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444},
                                              {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}
    files = {"hostfile": b"job-worker-0.job.ns.svc slots=1\n", "discover_hosts.sh": b"#!/bin/sh\n", "other": b"x"}
    assert projected_files(source, files, "ConfigMap job-config") == [
        ("hostfile", files["hostfile"], 0o444), ("discover_hosts.sh", files["discover_hosts.sh"], 0o555)]
    with pytest.raises(ContainerConfigError, match="no key 'missing'"):
        projected_files({"items": [{"key": "missing", "path": "m"}]}, files, "Secret s")
    assert projected_files({"defaultMode": 0o600}, {"a": b"1"}, "Secret s") == [("a", b"1", 0o600)]
