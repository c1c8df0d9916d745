"""The real nodes' network on the machine's own kernel: a node made again while the kernel still holds
its old namespace (deleted by name, not yet destroyed) gets its veth pair, instead of "File exists".

CI saw that race once: `up` after a crash tore the node down and made it again at once, and the
old namespace's veth was still on the cluster bridge. Here a process keeps the old namespace alive,
so the race is certain rather than a matter of the kernel's work queue.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPO

sys.path.insert(0, str(REPO))
from localcluster.base.layout import ClusterLayout
from localcluster.realnodes import network

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[ClusterLayout]:
    layout = ClusterLayout(tmp_path / "state")
    try:
        yield layout
    finally:
        for ns in network.cluster_namespaces(layout):
            network.delete_namespace(ns)
        network.remove_netns_dir_if_made(layout)
    assert network.cluster_namespaces(layout) == []


def links(netns: str) -> list[str]:
    out = network.ip("-n", netns, "-o", "link", "show")
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def test_a_node_made_again_while_its_old_namespace_lingers_gets_a_new_veth(layout: ClusterLayout):
    node = layout.node(0)
    network.ensure_cluster_network(layout)
    network.ensure_node_network(node)
    assert node.veth in links(layout.cluster_netns)

    # A process inside keeps the namespace alive after its name is deleted, as a dying container
    # (or the kernel's deferred clean-up) does.
    holder = subprocess.Popen(["ip", "netns", "exec", node.netns, "sh", "-c", "echo inside; exec sleep 60"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "inside\n"
        network.delete_namespace(node.netns)
        assert node.netns not in network.namespaces()
        assert node.veth in links(layout.cluster_netns), "the lingering namespace's veth is the race's cause"

        network.ensure_node_network(node)

        assert node.netns in network.namespaces()
        assert node.veth in links(layout.cluster_netns)
        assert "eth0" in links(node.netns)
        addresses = network.ip("-n", node.netns, "-o", "addr", "show", "dev", "eth0")
        assert f"{node.ip}/24" in addresses
        # The new pair is whole: eth0's carrier is its peer on the bridge.
        assert "LOWER_UP" in network.ip("-n", node.netns, "link", "show", "eth0")
    finally:
        holder.kill()
        holder.wait()
