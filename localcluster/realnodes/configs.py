"""The real nodes' configuration files: containerd, CNI, kubelet, kube-proxy, CoreDNS, and the API
server's egress selector. Pure functions of the layout (tested without a cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from localcluster.base.layout import (
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    GATEWAY_IP,
    INSTANCE_TYPE,
    POD_NET_CIDR,
    REAL_NODE_LABEL,
    ClusterLayout,
    NodeLayout,
)

CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
# Imported into each node (images.py), never pulled: a node starts before anything is pushed.
DEFAULT_SANDBOX_IMAGE = "kubetest2-training.local/pause:local"
CORE_DNS_HEALTH_PORT = 18080
CORE_DNS_READY_PORT = 18181
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256


def containerd_config(node: NodeLayout, sandbox_image: str) -> str:
    """containerd 1.6 (config version 2): its own root, socket and CNI folders; runc with cgroupfs;
    restrict_oom_score_adj because this machine forbids negative oom_score_adj (runc otherwise
    fails every sandbox: "can't get final child's PID from pipe: EOF"). Paths are the node's own
    (holder.py): /run is its tmpfs (state, sockets), /var/lib its folder on disk (root). Short
    paths: a unix socket's path has at most 107 bytes, overlayfs' mount options one page.
    Registries: one folder per registry name under the node's certs.d (registry.hosts_toml: the
    cluster's registry); a pulled layer's compressed blob is dropped once unpacked, as an imported
    one is (images.discard_unpacked_layers), so a node holds one copy of an image either way."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0
# Plugins that mount or reach outside the node's folders, or need what this machine lacks.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{node.containerd_socket}"

[ttrpc]
  address = "{node.containerd_socket.with_name('containerd.sock.ttrpc')}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = true

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{RUNC}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{node.path('cni', 'net.d')}"
  max_conf_num = 1

[{cri}.registry]
  config_path = "{registry_hosts_dir(node)}"
"""


def registry_hosts_dir(node: NodeLayout) -> Path:
    """containerd's `config_path`: <registry name>/hosts.toml in it says how to reach a registry."""
    return node.path("certs.d")


def cni_config(node: NodeLayout) -> dict[str, Any]:
    """A bridge (cni0, the pods' gateway) with host-local addresses of the node's pod subnet;
    no masquerading (nothing leaves the cluster network); portmap for hostPort."""
    return {
        "cniVersion": "1.0.0",
        "name": "kubetest2-training",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/var/lib/cni/networks"}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(node: NodeLayout, pki_dir: Path) -> dict[str, Any]:
    """kubelet: cgroupfs under the node's own cgroup root, its own folders, webhook authentication
    and authorization through the API server (its serving certificate signed by the cluster's CA)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(pki_dir / f"{node.name}-serving.crt"),
        "tlsPrivateKeyFile": str(pki_dir / f"{node.name}-serving.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki_dir / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{node.cgroup}",
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        # Reads the holder's files instead of the machine's kernel settings, and never writes them.
        "protectKernelDefaults": True,
        "oomScoreAdj": 0,
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(node.path("resolv.conf")),
        "podLogsDirectory": "/var/log/pods",
        # Its default (/usr/libexec/kubernetes/...) would be created on the machine.
        "volumePluginDir": "/var/lib/kubelet/volume-plugins",
        # Imported images cannot be pulled again: garbage collection must not remove them, and a
        # full machine must not evict the test's pods (the harness watches the disk itself).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "4s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "makeIPTablesUtilChains": True,
        "maxPods": 110,
        "registerNode": True,
        "shutdownGracePeriod": "0s",
    }


def kubelet_args(node: NodeLayout, kubelet_bin: Path, kubeconfig: Path, config: Path) -> list[str]:
    labels = {"node.kubernetes.io/instance-type": INSTANCE_TYPE, REAL_NODE_LABEL: "true"}
    return [
        str(kubelet_bin),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        # The node's /var/lib (holder.py): <node folder>/var-lib/kubelet on disk.
        "--root-dir=/var/lib/kubelet",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
        "--v=1",
    ]


def kube_proxy_config(node: NodeLayout, kubeconfig: Path) -> dict[str, Any]:
    """iptables mode inside the node's namespace. Every Service connection is masqueraded (no
    br_netfilter here: without it a reply between pods on one bridge would skip the reverse NAT).
    conntrack settings 0: kube-proxy leaves the machine's (global) conntrack table alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node.name,
        "bindAddress": node.ip,
        "clusterCIDR": POD_NET_CIDR,
        "healthzBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        "iptables": {"masqueradeAll": True, "syncPeriod": "10s", "minSyncPeriod": "0s"},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "oomScoreAdj": 0,
        "nodePortAddresses": [f"{node.ip}/32"],
    }


def corefile(layout: ClusterLayout, kubeconfig: Path) -> str:
    """CoreDNS on the cluster bridge's address: the cluster's names from the API, nothing else
    (no upstream: names outside the cluster fail, as nothing outside is reachable)."""
    return f""".:53 {{
    bind {GATEWAY_IP}
    errors
    health 127.0.0.1:{CORE_DNS_HEALTH_PORT}
    ready 127.0.0.1:{CORE_DNS_READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
"""


def egress_selector_config(layout: ClusterLayout) -> dict[str, Any]:
    """The API server's traffic to nodes and pods (`cluster`) goes through netd's unix socket."""
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [{"name": "cluster", "connection": {
            "proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(layout.netd_socket)}}}}],
    }


def resolv_conf() -> str:
    """The node's resolv.conf (pods with dnsPolicy Default get it): the cluster DNS only."""
    return f"nameserver {DNS_SERVICE_IP}\n"


def write_if_changed(path: Path, text: str) -> bool:
    """Writes text unless the file already holds it; True when it changed."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)
    return True


def dump_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def dump_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


__all__ = [
    "GATEWAY_IP",
    "cni_config",
    "containerd_config",
    "corefile",
    "egress_selector_config",
    "kube_proxy_config",
    "kubelet_args",
    "kubelet_config",
]
