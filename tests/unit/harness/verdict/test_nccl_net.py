"""With EFA expected on a multi-node job, NCCL must say it used EFA (NET/OFI, Libfabric) on every
node and never its socket transport: NCCL_DEBUG=INFO is set for it (unless the user set a level),
and each host's NCCL INFO lines are judged, on the canned GPU logs with NCCL 2.2x / aws-ofi-nccl
lines added, a socket-fallback variant among them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config.settings import resolve
from harness.config.topology import NodeInfo, Topology
from harness.framework.cli import parse_args
from harness.jobs.job import efa_expected, placement_for
from harness.jobs.workload import Workload
from harness.verdict.checks import Status
from harness.verdict.nccl_net import check_nccl_net, scan_nccl_net

CANNED = Path(__file__).resolve().parents[4] / "localcluster" / "emulation" / "canned_logs"
WHY = "EFA expected (32 vpc.amazonaws.com/efa per node, 2 nodes)"
NODES = ("kwok-p5-0", "kwok-p5-1")


def efa_lines(host: str) -> list[str]:
    return [f"{host}:101:201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>",
            f"{host}:101:201 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
            f"{host}:101:201 [0] NCCL INFO Using network Libfabric",
            f"{host}:101:230 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA"]


def socket_lines(host: str) -> list[str]:
    return [f"{host}:101:201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.6<0>",
            f"{host}:101:201 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
            f"{host}:101:201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.6<0>",
            f"{host}:101:201 [0] NCCL INFO Using network Socket",
            f"{host}:101:230 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [send] via NET/Socket/0"]


def canned_pods(second_node_socket: bool = False) -> list[tuple[str, str, list[str]]]:
    """The canned nanoGPT p5 logs (2 pods), each with its host's NCCL INFO lines first."""
    pods = []
    for index, node in enumerate(NODES):
        host = f"nanogpt-training-{index}"  # an Indexed Job pod's hostname
        nccl = socket_lines(host) if second_node_socket and index == 1 else efa_lines(host)
        lines = (CANNED / f"nanogpt-p5-healthy-{index}.log").read_text().splitlines()
        pods.append((f"{host}-abcde", node, nccl + lines))
    return pods


HOSTS = {"nanogpt-training-0": NODES[0], "nanogpt-training-1": NODES[1]}


def test_efa_on_every_node_passes():
    check = check_nccl_net(scan_nccl_net(canned_pods(), HOSTS), WHY, "INFO", NODES)
    assert check.status is Status.PASS, check.message
    assert "all 2 hosts" in check.message


def test_a_socket_fallback_fails_naming_the_host_and_node():
    check = check_nccl_net(scan_nccl_net(canned_pods(second_node_socket=True), HOSTS), WHY, "INFO", NODES)
    assert check.status is Status.FAIL
    assert check.message.startswith(f"efa: {WHY}, but NCCL used its socket transport (NET/Socket), not EFA, on "
                                    "nanogpt-training-1 on node kwok-p5-1 ('NET/Socket : Using [0]eth0"), check.message
    assert "kwok-p5-0" not in check.message


def test_no_efa_line_or_a_silent_node_fails_and_a_user_level_is_not_applicable():
    no_plugin = [("p-0", NODES[0], [line for line in efa_lines("h0") if "Bootstrap" in line]),
                 ("p-1", NODES[1], efa_lines("h1"))]
    check = check_nccl_net(scan_nccl_net(no_plugin, {}), WHY, "INFO", NODES)
    assert check.status is Status.FAIL
    assert "no NET/OFI or NET/Libfabric line on h0 (pod p-0) on node kwok-p5-0" in check.message
    silent = check_nccl_net(scan_nccl_net([("p-0", NODES[0], efa_lines("h0"))], {}), WHY, "INFO", NODES)
    assert silent.status is Status.FAIL and "no NCCL INFO line came from node kwok-p5-1" in silent.message
    user = check_nccl_net(scan_nccl_net([], {}), WHY, "WARN", NODES)
    assert user.status is Status.NOT_APPLICABLE and "NCCL_DEBUG=WARN" in user.message


def test_mpirun_tagged_lines_in_the_launchers_log_are_placed_by_host():
    tagged = [f"[1,{r}]<stdout>:{line}" for r, line in enumerate(efa_lines("bert-training-worker-0"))]
    tagged += [f"[1,9]<stdout>:{line}" for line in socket_lines("bert-training-worker-1")]
    hosts = {"bert-training-worker-0": NODES[0], "bert-training-worker-1": NODES[1]}
    check = check_nccl_net(scan_nccl_net([("bert-training-launcher-x", "kwok-p5-0", tagged)], hosts), WHY, "INFO",
                           NODES)
    assert check.status is Status.FAIL and "bert-training-worker-1 on node kwok-p5-1" in check.message


def context(efa: int, nodes: int = 2, argv: tuple[str, ...] = ()) -> SimpleNamespace:
    infos = tuple(NodeInfo(f"kwok-p5-{i}", "p5.48xlarge", 8, efa, True) for i in range(nodes))
    cfg = resolve(parse_args(list(argv)), {})
    return SimpleNamespace(topology=Topology("p5.48xlarge", infos, 8, efa), cfg=cfg, name="TestNanoGPTTraining")


@pytest.mark.parametrize(("efa", "nodes", "argv", "expected"), [
    (32, 2, (), False), (32, 2, ("--efaEnabled=false",), False), (32, 2, ("--efaEnabled=true",), True),
    (0, 2, (), False), (32, 1, ("--efaEnabled=true",), False), (0, 2, ("--efaEnabled=true",), True),
    (0, 1, ("--efaEnabled=true",), False)])
def test_efa_is_expected_on_multi_node_jobs_with_efa_enabled(efa, nodes, argv, expected):
    """upstream's meaning: --efaEnabled=false, its default, judges nothing about EFA even where
    the nodes advertise it."""
    assert bool(efa_expected(context(efa, nodes, argv), nodes)) is expected  # type: ignore[arg-type]


def test_nccl_debug_info_is_set_when_efa_is_expected_unless_the_user_set_it(monkeypatch):
    workload = Workload("nanogpt-training", "workloads.nanogpt")
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    enabled = ("--efaEnabled=true",)
    assert placement_for(context(32, argv=enabled), "ns", workload).pod_env["NCCL_DEBUG"] == "INFO"  # type: ignore[arg-type]
    assert "NCCL_DEBUG" not in placement_for(context(32), "ns", workload).pod_env  # type: ignore[arg-type]
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    assert placement_for(context(32, argv=enabled), "ns", workload).pod_env["NCCL_DEBUG"] == "WARN"  # type: ignore[arg-type]


def test_jobs_request_the_efa_devices_their_nodes_advertise():
    """upstream requests what the node has: a p5 advertising 30 interfaces (the table says 32) gets
    pods asking for 30, not workers Pending; EFA_PER_NODE, when set, is what is asked."""
    workload = Workload("nanogpt-training", "workloads.nanogpt")
    infos = (NodeInfo("kwok-p5-0", "p5.48xlarge", 8, 32, True), NodeInfo("kwok-p5-1", "p5.48xlarge", 8, 30, True))
    t = SimpleNamespace(topology=Topology("p5.48xlarge", infos, 8, 32), cfg=resolve(parse_args([]), {}), name="T")
    assert placement_for(t, "ns", workload).efa_per_node == 30  # type: ignore[arg-type]
    assert placement_for(t, "ns", replace(workload, on_nodes=("kwok-p5-0",))).efa_per_node == 32  # type: ignore[arg-type]
    t.cfg = resolve(parse_args([]), {"EFA_PER_NODE": "16"})
    t.topology = Topology("p5.48xlarge", infos, 8, 16)
    assert placement_for(t, "ns", workload).efa_per_node == 16  # type: ignore[arg-type]


def test_one_canned_log_served_to_every_pod_counts_once_per_pod():
    # The local cluster serves one file to each pod: an unknown host name is the printing pod's.
    lines = (CANNED / "allreduce-16gpus.log").read_text().splitlines()
    pods = [("nccl-allreduce-0-x", NODES[0], lines), ("nccl-allreduce-1-y", NODES[1], lines)]
    assert check_nccl_net(scan_nccl_net(pods, {}), WHY, "INFO", NODES).status is Status.PASS
    socket = (CANNED / "allreduce-16gpus-socket.log").read_text().splitlines()
    check = check_nccl_net(scan_nccl_net([pods[0], ("nccl-allreduce-1-y", NODES[1], socket)], {}), WHY, "INFO",
                           NODES)
    assert check.status is Status.FAIL
    assert "ip-10-1-0-5 (pod nccl-allreduce-1-y) on node kwok-p5-1 ('NET/Socket : Using" in check.message
