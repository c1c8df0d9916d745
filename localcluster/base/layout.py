"""Where everything of the real nodes lives: names (carrying the cluster's identity), addresses, folders.

One cluster network namespace (`kt2t-<id>-net`) holds a bridge that every node's network namespace
(`kt2t-<id>-<node>`) is attached to by a veth pair; it routes between the nodes' pod subnets and has
no route anywhere else. The id comes from the state folder, so two clusters (different KT2T_STATE)
never share a namespace, cgroup or folder; the addresses inside the namespaces may repeat.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

# The cluster network: the bridge's address (the API forwarder and CoreDNS listen on it) and the
# nodes' addresses after it.
CLUSTER_NET_PREFIX = "10.250.0"
CLUSTER_NET_CIDR = f"{CLUSTER_NET_PREFIX}.0/24"
GATEWAY_IP = f"{CLUSTER_NET_PREFIX}.1"
FIRST_NODE_HOST = 10
# Pods of real node i: 10.245.i.0/24 (kwok hands its fake pods addresses of 10.244.0.0/16).
POD_NET_CIDR = "10.245.0.0/16"
# Addresses netd dials inside the cluster network (anything else but 127.0.0.1 is refused).
CLUSTER_CIDRS = (CLUSTER_NET_CIDR, POD_NET_CIDR)
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
INSTANCE_TYPE = "container-cpu"
REAL_NODE_LABEL = "kubetest2-training.local/real-node"
MAX_REAL_NODES = 200
NAMESPACE_PREFIX = "kt2t-"


def cluster_id(state_dir: Path) -> str:
    """Eight hex digits of the state folder's path: the cluster's identity in every name."""
    return hashlib.sha256(str(state_dir.absolute()).encode()).hexdigest()[:8]


def node_name(index: int) -> str:
    return f"real-cpu-{index}"


def node_index(name: str) -> int:
    prefix = node_name(0)[:-1]
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        raise ValueError(f"{name!r} is not a real node's name (expected {prefix}<index>)")
    return int(name[len(prefix):])


@dataclass(frozen=True)
class ClusterLayout:
    """Names and folders of the whole real-node part of one cluster."""

    state_dir: Path

    @property
    def id(self) -> str:
        return cluster_id(self.state_dir)

    @property
    def prefix(self) -> str:
        """Every namespace and cgroup of this cluster starts with it."""
        return f"{NAMESPACE_PREFIX}{self.id}-"

    @property
    def cluster_netns(self) -> str:
        return f"{self.prefix}net"

    @property
    def cgroup(self) -> str:
        """The cgroup (in every hierarchy) under which every process of the real nodes runs."""
        return f"{NAMESPACE_PREFIX}{self.id}"

    @property
    def root(self) -> Path:
        return self.state_dir / "real-nodes"

    @property
    def netd_socket(self) -> Path:
        """The API server's egress (HTTP CONNECT) into the cluster network. In /run, named by the
        cluster's identity: a unix socket's path has at most 107 bytes, too few for a state folder
        deep in a test's temporary folders."""
        return Path("/run") / f"{self.prefix}netd.sock"

    @property
    def egress_config(self) -> Path:
        return self.root / "egress-selector.yaml"

    @property
    def made_netns_dir(self) -> Path:
        """Written when this cluster's first `ip netns add` made /run/netns: down removes it then."""
        return self.root / "made-run-netns"

    @property
    def count_file(self) -> Path:
        """How many real nodes `up --real-nodes N` asked for; later `up`s keep that many."""
        return self.root / "count"

    @property
    def coredns_dir(self) -> Path:
        return self.root / "coredns"

    @property
    def registry_dir(self) -> Path:
        """The image registry's configuration and, under data/, its blobs."""
        return self.root / "registry"

    def node(self, index: int) -> NodeLayout:
        return NodeLayout(self, index)


@dataclass(frozen=True)
class NodeLayout:
    """One real node's names, addresses and folders."""

    cluster: ClusterLayout
    index: int

    @property
    def name(self) -> str:
        return node_name(self.index)

    @property
    def netns(self) -> str:
        return f"{self.cluster.prefix}{self.name}"

    @property
    def ip(self) -> str:
        return f"{CLUSTER_NET_PREFIX}.{FIRST_NODE_HOST + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.245.{self.index}.0/24"

    @property
    def veth(self) -> str:
        """The cluster namespace's end of the node's veth pair (the node's end is eth0)."""
        return f"veth{self.index}"

    @property
    def cgroup(self) -> str:
        """kubelet's cgroupRoot: its pods go to <this>/kubepods; the node's daemons to <this>/system."""
        return f"{self.cluster.cgroup}/{self.name}"

    @property
    def dir(self) -> Path:
        return self.cluster.root / self.name

    @property
    def containerd_socket(self) -> Path:
        """As kubelet sees it, in the node's own /run (holder.py); from the machine it is
        /proc/<holder pid>/root/run/... (manager.RealNodes.containerd_address)."""
        return Path("/run/containerd/containerd.sock")

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)
