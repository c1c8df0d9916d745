"""The real nodes' pure parts (localcluster/realnodes/): names carry the cluster's identity,
addresses do not collide between nodes, netd dials only cluster and loopback addresses, and the
configuration files say what the module docstrings promise."""

from __future__ import annotations

import ipaddress
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.base.layout import ClusterLayout, cluster_id, node_index, node_name
from localcluster.realnodes import configs, images, netd, registry


def test_two_state_folders_never_share_a_name(tmp_path: Path):
    a, b = ClusterLayout(tmp_path / "a"), ClusterLayout(tmp_path / "b")
    assert a.id != b.id and len(a.id) == 8
    assert a.cluster_netns.startswith(a.prefix) and a.node(0).netns.startswith(a.prefix)
    assert {a.cluster_netns, a.node(0).netns, a.cgroup} .isdisjoint({b.cluster_netns, b.node(0).netns, b.cgroup})
    assert cluster_id(tmp_path / "a") == a.id  # stable: a crashed cluster's leftovers are found again


def test_nodes_get_distinct_addresses_and_pod_subnets(tmp_path: Path):
    layout = ClusterLayout(tmp_path)
    nodes = [layout.node(i) for i in range(3)]
    assert len({n.ip for n in nodes}) == 3
    subnets = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    assert not any(x.overlaps(y) for i, x in enumerate(subnets) for y in subnets[i + 1:])
    assert all(s.subnet_of(ipaddress.ip_network("10.245.0.0/16")) for s in subnets)
    assert node_index(node_name(7)) == 7
    with pytest.raises(ValueError, match="kwok-cpu-0"):
        node_index("kwok-cpu-0")


@pytest.mark.parametrize(("host", "side"), [
    ("10.250.0.10", "cluster"), ("10.245.1.7", "cluster"), ("127.0.0.1", "machine"),
    ("10.96.0.1", None), ("8.8.8.8", None), ("169.254.169.254", None), ("localhost", None), ("::1", None),
])
def test_netd_dials_cluster_and_loopback_addresses_only(host: str, side: str | None):
    assert netd.where(host) == side


def test_kubelet_never_writes_the_machines_kernel_settings(tmp_path: Path):
    layout = ClusterLayout(tmp_path)
    config = configs.kubelet_config(layout.node(0), tmp_path / "pki")
    assert config["protectKernelDefaults"] is True
    assert config["cgroupRoot"] == f"/{layout.cgroup}/real-cpu-0"
    assert config["cgroupDriver"] == "cgroupfs" and config["oomScoreAdj"] == 0
    assert config["address"] == layout.node(0).ip


def test_kube_proxy_leaves_the_global_conntrack_settings_alone(tmp_path: Path):
    config = configs.kube_proxy_config(ClusterLayout(tmp_path).node(1), tmp_path / "k")
    assert config["conntrack"] == {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                                   "tcpCloseWaitTimeout": "0s"}
    assert config["mode"] == "iptables" and config["oomScoreAdj"] == 0


def test_containerd_keeps_its_files_in_the_nodes_own_folders(tmp_path: Path):
    node = ClusterLayout(tmp_path).node(0)
    text = configs.containerd_config(node, "x/pause:1")
    # /var/lib and /run are the node's own (holder.py): its folder on disk and its tmpfs.
    assert 'root = "/var/lib/containerd"' in text and 'state = "/run/containerd"' in text
    assert "restrict_oom_score_adj = true" in text and "SystemdCgroup = false" in text
    assert f'address = "{node.containerd_socket}"' in text and str(node.containerd_socket).startswith("/run/")
    assert str(node.path("cni", "net.d")) in text
    cni = configs.cni_config(node)
    assert cni["plugins"][0]["ipam"]["dataDir"].startswith("/var/lib/")
    assert cni["plugins"][0]["ipMasq"] is False


def test_egress_selector_sends_cluster_traffic_to_netd(tmp_path: Path):
    layout = ClusterLayout(tmp_path)
    selection = yaml.safe_load(configs.dump_yaml(configs.egress_selector_config(layout)))["egressSelections"][0]
    assert selection["name"] == "cluster"
    assert selection["connection"]["transport"]["uds"]["udsName"] == str(layout.netd_socket)


def test_an_oci_archive_names_its_image_and_holds_its_layer(tmp_path: Path):
    archive = tmp_path / "x.tar"
    layer = images.layer_tar([images.LayerFile("bin/x", b"#!/bin/sh\n"), images.LayerFile("bin/y", link="x")])
    images.write_oci_archive(archive, "example.local/x:1", layer, ["/bin/x"], [])
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        index = tar.extractfile("index.json").read().decode()  # type: ignore[union-attr]
    assert "oci-layout" in names and sum(n.startswith("blobs/sha256/") for n in names) == 3
    assert '"io.containerd.image.name": "example.local/x:1"' in index


def test_the_sandbox_image_builds_pause_as_the_pause_images_dockerfile_does():
    """One pause program, two builds (gcc here, buildah for images/pause): the same source and flags."""
    dockerfile = (images.PAUSE_SOURCE.parent / "Dockerfile").read_text()
    assert f"RUN gcc {' '.join(images.PAUSE_CFLAGS)} -o /pause /src/pause.c" in dockerfile
    assert "COPY images/pause/pause.c /src/pause.c" in dockerfile


def test_the_nodes_pull_the_registrys_name_from_the_cluster_bridge_over_http(tmp_path: Path):
    """An image is `127.0.0.1:<port>/...` on the machine and in a pod spec; inside a node 127.0.0.1
    is the node's own, so containerd's hosts.toml for that name points at netd's forwarder."""
    node = ClusterLayout(tmp_path).node(0)
    text = configs.containerd_config(node, "x/pause:1")
    assert f'config_path = "{configs.registry_hosts_dir(node)}"' in text
    assert "discard_unpacked_layers = true" in text
    hosts = registry.hosts_toml(28110)
    assert hosts.startswith('server = "http://10.250.0.1:28110"'), hosts
    assert '[host."http://10.250.0.1:28110"]' in hosts and '"pull", "resolve"' in hosts
    assert registry.address(28110) == "127.0.0.1:28110"
    served = yaml.safe_load(configs.dump_yaml(registry.config(tmp_path / "data", 28110)))
    assert served["http"]["addr"] == "127.0.0.1:28110"
    assert served["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "data")


def test_the_registry_port_moves_with_the_offset_and_is_no_other_clusters_port():
    from localcluster.base.settings import DEFAULT_PORTS, Settings
    ports = Settings.from_env({"KT2T_PORT_OFFSET": "3100", "HOME": "/nonexistent"}).ports
    assert ports["registry"] == DEFAULT_PORTS["registry"] + 3100
    # Offsets are multiples of 100: equal last two digits could collide across clusters.
    endings = [port % 100 for name, port in DEFAULT_PORTS.items() if name != "registry"]
    assert DEFAULT_PORTS["registry"] % 100 not in endings
