"""The real nodes' network: namespaces, the cluster bridge, each node's veth pair and routes.

Everything is made with `ip` inside namespaces of this cluster: no interface, address or route is
added to the machine's own namespace, and the cluster namespace has no interface but its bridge,
so a packet from a pod can reach another pod, a node, CoreDNS or the API forwarder, and nothing
else (no default route anywhere: "Network is unreachable").
"""

from __future__ import annotations

import contextlib
import subprocess

from localcluster.base import linux
from localcluster.base.layout import CLUSTER_NET_CIDR, GATEWAY_IP, POD_NET_CIDR, ClusterLayout, NodeLayout

SERVICE_CIDR = "10.96.0.0/16"
BRIDGE = "br0"


class NetworkError(Exception):
    """An `ip` command failed; the message has the command and its error."""


def ip(*args: str, check: bool = True) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def namespaces() -> list[str]:
    """Every named network namespace (`ip netns list`)."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def sysctl_in(netns: str, key: str, value: str) -> None:
    """A per-namespace sysctl (net.*), written inside the namespace: the machine's stay untouched."""
    path = "/proc/sys/" + key.replace(".", "/")
    result = subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", f"echo {value} > {path}"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise NetworkError(f"sysctl {key}={value} in {netns}: {result.stderr.strip()}")


def ensure_cluster_network(layout: ClusterLayout) -> None:
    """The cluster namespace with its bridge (the gateway address) and forwarding on."""
    ns = layout.cluster_netns
    if ns in namespaces():
        return
    if not linux.NETNS_DIR.exists():
        # iproute2 is about to make it: down removes it again, once no namespace is left in it.
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.made_netns_dir.touch()
    ip("netns", "add", ns)
    ip("-n", ns, "link", "set", "lo", "up")
    ip("-n", ns, "link", "add", BRIDGE, "type", "bridge")
    ip("-n", ns, "addr", "add", f"{GATEWAY_IP}/24", "dev", BRIDGE)
    ip("-n", ns, "link", "set", BRIDGE, "up")
    sysctl_in(ns, "net.ipv4.ip_forward", "1")


def ensure_node_network(node: NodeLayout) -> None:
    """The node's namespace, its eth0 on the cluster bridge, routes to the pods and Services via
    the cluster namespace, and the route there to the node's pods."""
    cluster_ns, ns = node.cluster.cluster_netns, node.netns
    if ns in namespaces():
        return
    ip("netns", "add", ns)
    ip("-n", ns, "link", "set", "lo", "up")
    delete_stale_link(cluster_ns, node.veth)
    ip("-n", cluster_ns, "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("-n", cluster_ns, "link", "set", node.veth, "master", BRIDGE, "up")
    ip("-n", ns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    # Pods and Service addresses go through the cluster namespace (kube-proxy rewrites Service
    # addresses first); there is no default route.
    ip("-n", ns, "route", "add", POD_NET_CIDR, "via", GATEWAY_IP)
    ip("-n", ns, "route", "add", SERVICE_CIDR, "via", GATEWAY_IP)
    ip("-n", cluster_ns, "route", "replace", node.pod_cidr, "via", node.ip)
    sysctl_in(ns, "net.ipv4.ip_forward", "1")


def delete_stale_link(netns: str, link: str) -> None:
    """Deletes `link` in `netns` if it is there: the veth of a node namespace deleted a moment ago.

    `ip netns delete` only removes the name; the kernel destroys the namespace later, in a work
    queue, once its last reference is gone, and the veth pair goes with it. A node made again at
    once (`up` after a crash) found its old veth still on the bridge ("RTNETLINK answers: File
    exists"). Deleting one end of a veth pair deletes both.
    """
    if ip("-n", netns, "link", "show", link, check=False):
        # Gone meanwhile, with its namespace, is as good: `link add` says so if it is still there.
        ip("-n", netns, "link", "delete", link, check=False)


def delete_namespace(name: str) -> None:
    ip("netns", "delete", name, check=False)


def remove_netns_dir_if_made(layout: ClusterLayout) -> bool:
    """Removes /run/netns (and iproute2's bind mount of it onto itself) when this cluster's first
    `ip netns add` made it and no namespace is left in it (another cluster's, or anyone's, keeps
    it). Returns whether it was removed."""
    if not layout.made_netns_dir.exists() or not linux.NETNS_DIR.is_dir() or any(linux.NETNS_DIR.iterdir()):
        return False
    # A folder bind-mounted onto itself shows as a mount point once per `ip netns add` that raced to make it.
    with contextlib.suppress(OSError):  # a namespace added meanwhile keeps it (rmdir fails: not empty)
        for _ in range(8):
            if linux.NETNS_DIR not in linux.mounts_under(linux.NETNS_DIR):
                break
            linux.umount_lazy(linux.NETNS_DIR)
        linux.NETNS_DIR.rmdir()
    layout.made_netns_dir.unlink(missing_ok=True)
    return not linux.NETNS_DIR.exists()


def cluster_namespaces(layout: ClusterLayout) -> list[str]:
    return [ns for ns in namespaces() if ns.startswith(layout.prefix)]


__all__ = ["CLUSTER_NET_CIDR", "NetworkError", "cluster_namespaces", "delete_namespace",
           "delete_stale_link", "ensure_cluster_network", "ensure_node_network", "namespaces",
           "remove_netns_dir_if_made"]
