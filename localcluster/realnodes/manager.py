"""Bringing the real nodes up, checking them, and taking them down (crash leftovers included).

Per cluster: the cluster network namespace, netd (netd.py), the image registry (registry.py) and
CoreDNS. Per node: its namespace,
the holder (holder.py), containerd, the images, kubelet and kube-proxy. Every process is started
into the cluster's cgroup (layout.ClusterLayout.cgroup) and recorded like the control plane's
(processes.ProcessRecord); containerd, kubelet and kube-proxy enter the holder's mount and network
namespaces before they exec.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.base import linux
from localcluster.base.layout import (
    DNS_SERVICE_IP,
    GATEWAY_IP,
    MAX_REAL_NODES,
    REAL_NODE_LABEL,
    ClusterLayout,
    NodeLayout,
    node_index,
)
from localcluster.base.settings import REPO_DIR, Settings
from localcluster.control.api import ApiClient, ApiError
from localcluster.control.kubeconfig import write_kubeconfig
from localcluster.control.pki import Pki
from localcluster.control.processes import ProcessRecord, code_fingerprint
from localcluster.control.waits import progress, wait_until
from localcluster.realnodes import configs, images, network, preflight, registry
from localcluster.realnodes.holder import READY_FILE

FIELD_MANAGER = "kubetest2-training-real-nodes"
STAND_IN_TAINT = {"key": "kubetest2-training.local/stand-in", "value": "kwok", "effect": "PreferNoSchedule"}
COREDNS_USER = "kubetest2-training-coredns"
NODE_BINARIES = ("kubelet", "kube-proxy", "coredns")


class RealNodeError(Exception):
    """A real node could not be made or did not come up; the message names the node and the step."""


def log(message: str) -> None:
    progress(message)


@dataclass(frozen=True)
class Process:
    """One process of the real nodes: how to start it, where, and how to tell it works."""

    name: str
    argv: list[str]
    log_file: Path
    healthy: Callable[[], bool]
    cgroup: str  # under the cluster's; made before the start
    preexec: Callable[[], None]
    config_files: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def http_ok_in(netns: str, url: str) -> Callable[[], bool]:
    """A health check run from inside a network namespace (the endpoint listens on its 127.0.0.1)."""
    def check() -> bool:
        try:
            return linux.in_netns(netns, lambda: http_ok(url))
        except OSError:
            return False
    return check


@dataclass
class RealNodes:
    """The real nodes of one cluster (see the module docstring)."""

    settings: Settings
    pki: Pki
    layout: ClusterLayout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = ClusterLayout(self.settings.state_dir)

    # ---- how many -------------------------------------------------------------------------------

    def wanted(self) -> int:
        """The count `up --real-nodes N` asked for (kept in the state folder), else 0."""
        if self.settings.real_nodes is not None:
            return self.settings.real_nodes
        try:
            return int(self.layout.count_file.read_text())
        except (OSError, ValueError):
            return 0

    def nodes(self, count: int | None = None) -> list[NodeLayout]:
        return [self.layout.node(i) for i in range(self.wanted() if count is None else count)]

    def binary(self, name: str) -> Path:
        return self.settings.bin_dir / name

    def check(self, binaries: bool) -> None:
        """Before anything is made (and, with `binaries`, after the build): RealNodeError naming
        everything missing."""
        count = self.wanted()
        if not 0 <= count <= MAX_REAL_NODES:
            raise RealNodeError(f"--real-nodes {count}: expected 0 to {MAX_REAL_NODES}")
        if count == 0:
            return
        found = preflight.problems([self.binary(b) for b in NODE_BINARIES] if binaries else [])
        if found:
            raise RealNodeError("cannot start real nodes:\n  - " + "\n  - ".join(found))

    # ---- before the API server ------------------------------------------------------------------

    def prepare(self) -> None:
        """Files the API server reads at start (the egress selector) and the nodes' certificates."""
        if self.wanted() == 0:
            return
        self.layout.root.mkdir(parents=True, exist_ok=True)
        self.layout.count_file.write_text(f"{self.wanted()}\n")
        configs.write_if_changed(self.layout.egress_config,
                                 configs.dump_yaml(configs.egress_selector_config(self.layout)))
        self.pki.sign_client("real-nodes-coredns", COREDNS_USER)
        self.pki.sign_client("real-nodes-kube-proxy", "system:kube-proxy")
        for node in self.nodes():
            self.pki.sign_client(f"{node.name}-kubelet", f"system:node:{node.name}", "system:nodes")
            self.pki.sign_serving(f"{node.name}-serving", f"system:node:{node.name}",
                                  (f"IP:{node.ip}", f"DNS:{node.name}"))

    # ---- after the control plane ----------------------------------------------------------------

    def ensure(self, api: ApiClient) -> None:
        """Makes or repairs everything of the wanted nodes, removes nodes beyond the count, waits Ready."""
        count = self.wanted()
        self.remove_extra_nodes(api, count)
        if count == 0:
            return
        started = time.monotonic()
        self.bootstrap_api(api)
        self.prefer_real_nodes(api)
        linux.make_cgroup(self.layout.cgroup)
        network.ensure_cluster_network(self.layout)
        self.ensure_process(self.netd())
        self.ensure_process(self.registry())
        self.ensure_process(self.coredns())
        for node in self.nodes():
            self.ensure_node(node)
        self.wait_ready(api)
        log(f"real nodes: {', '.join(n.name for n in self.nodes())} Ready ({time.monotonic() - started:.1f}s); "
            f"their registry: {self.registry_address()} (hack/images push {self.registry_address()})")

    def ensure_node(self, node: NodeLayout) -> None:
        holder = self.holder(node)
        if ProcessRecord(self.settings.run_dir, holder.name).running_pid() is None:
            # No holder: a new node, or one whose processes died (a crash): start it from scratch.
            self.teardown_node(node)
            network.ensure_node_network(node)
            linux.make_cgroup(f"{node.cgroup}/system")
            self.write_node_files(node)
            self.ensure_process(holder)
        else:
            self.write_node_files(node)
        self.ensure_process(self.containerd(node))
        self.ensure_images(node)
        self.ensure_process(self.kubelet(node))
        self.ensure_process(self.kube_proxy(node))

    def write_node_files(self, node: NodeLayout) -> None:
        for folder in ("var-lib", "var-log"):
            node.path(folder).mkdir(parents=True, exist_ok=True)
        configs.write_if_changed(node.path("resolv.conf"), configs.resolv_conf())
        configs.write_if_changed(node.path("containerd.toml"),
                                 configs.containerd_config(node, configs.DEFAULT_SANDBOX_IMAGE))
        configs.write_if_changed(configs.registry_hosts_dir(node) / self.registry_address() / "hosts.toml",
                                 registry.hosts_toml(self.settings.ports["registry"]))
        configs.write_if_changed(node.path("cni", "net.d", "10-kubetest2-training.conflist"),
                                 configs.dump_json(configs.cni_config(node)))
        configs.write_if_changed(node.path("kubelet.yaml"),
                                 configs.dump_yaml(configs.kubelet_config(node, self.pki.directory)))
        configs.write_if_changed(node.path("kube-proxy.yaml"),
                                 configs.dump_yaml(configs.kube_proxy_config(node, node.path("kube-proxy.kubeconfig"))))
        server = f"https://{GATEWAY_IP}:{self.settings.ports['kube-apiserver']}"
        write_kubeconfig(node.path("kubelet.kubeconfig"), server, self.pki, f"{node.name}-kubelet")
        write_kubeconfig(node.path("kube-proxy.kubeconfig"), server, self.pki, "real-nodes-kube-proxy")

    def ensure_images(self, node: NodeLayout) -> None:
        """The sandbox and test images, and every archive loaded with `load-image` (a node made
        after the load, or rebuilt after a crash, gets them too)."""
        cache = self.settings.bin_dir.parent / "images" / "real-nodes"
        try:
            archives = {configs.DEFAULT_SANDBOX_IMAGE: images.pause_archive(cache),
                        images.TEST_IMAGE: images.test_image_archive(cache)}
            present = images.imported_images(node, self.containerd_address(node))
            for name, archive in archives.items():
                if name not in present:
                    images.import_archive(node, self.containerd_address(node), archive)
                    images.discard_unpacked_layers(self.containerd_address(node))
                    log(f"{node.name}: imported {name}")
            done = self.imported_archives(node)
            for archive in self.loaded_archives():
                if archive not in done:
                    self.import_into(node, archive)
        except images.ImageError as error:
            raise RealNodeError(str(error)) from None

    def loaded_archives(self) -> list[Path]:
        listing = self.layout.root / "loaded-images"
        return [Path(line) for line in listing.read_text().splitlines() if line] if listing.exists() else []

    @staticmethod
    def imported_archives(node: NodeLayout) -> list[Path]:
        marks = node.path("imported-archives")
        return [Path(line) for line in marks.read_text().splitlines() if line] if marks.exists() else []

    def import_into(self, node: NodeLayout, archive: Path) -> None:
        started = time.monotonic()
        images.import_archive(node, self.containerd_address(node), archive)
        images.discard_unpacked_layers(self.containerd_address(node))
        with open(node.path("imported-archives"), "a") as marks:
            marks.write(f"{archive.absolute()}\n")
        log(f"{node.name}: imported {archive} ({time.monotonic() - started:.1f}s)")

    def load_image(self, archive: Path) -> list[str]:
        """Imports an image archive into every real node that lacks it, all nodes at once (each import
        is one `ctr` process decompressing and unpacking on its own; the workloads image's 8 GB one
        node after the other is what made loading slow); returns those nodes' names."""
        if not archive.is_file():
            raise RealNodeError(f"load-image: {archive} is not a file (expected an OCI or docker archive)")
        # The same file again is there already (a rebuilt image is a new file).
        missing = [node for node in self.nodes() if archive.absolute() not in self.imported_archives(node)]
        with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
            outcomes = list(pool.map(lambda node: self._import_or_error(node, archive), missing))
        errors = [error for error in outcomes if error is not None]
        if errors:
            raise RealNodeError("\n".join(errors))
        known = self.loaded_archives()
        if archive.absolute() not in known:
            (self.layout.root / "loaded-images").write_text("".join(f"{p}\n" for p in [*known, archive.absolute()]))
        return [node.name for node in missing]

    def _import_or_error(self, node: NodeLayout, archive: Path) -> str | None:
        try:
            self.import_into(node, archive)
        except images.ImageError as error:
            return str(error)
        return None

    # ---- the processes --------------------------------------------------------------------------

    def netd(self) -> Process:
        layout = self.layout
        return Process(
            "netd",
            [sys.executable, "-m", "localcluster.realnodes.netd", f"--netns={layout.cluster_netns}",
             f"--socket={layout.netd_socket}", f"--forward-port={self.settings.ports['kube-apiserver']}",
             f"--forward-port={self.settings.ports['registry']}"],
            self.settings.logs_dir / "netd.log", self.netd_healthy, f"{layout.cgroup}/netd",
            self.enter(cgroup=f"{layout.cgroup}/netd"),
            config_files=sorted(Path(__file__).parent.glob("*.py")),
            env={"PYTHONPATH": str(REPO_DIR)})

    def netd_healthy(self) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.layout.netd_socket))
                return True
            except OSError:
                return False

    def registry_address(self) -> str:
        return registry.address(self.settings.ports["registry"])

    def registry(self) -> Process:
        layout, port = self.layout, self.settings.ports["registry"]
        config = layout.registry_dir / "config.yml"
        configs.write_if_changed(config, configs.dump_yaml(registry.config(layout.registry_dir / "data", port)))
        return Process(
            "registry", [registry.COMMAND, "serve", str(config)], self.settings.logs_dir / "registry.log",
            lambda: http_ok(f"http://{self.registry_address()}/v2/"), f"{layout.cgroup}/registry",
            self.enter(cgroup=f"{layout.cgroup}/registry"), config_files=[config])

    def coredns(self) -> Process:
        layout = self.layout
        kubeconfig = layout.coredns_dir / "coredns.kubeconfig"
        corefile = layout.coredns_dir / "Corefile"
        server = f"https://{GATEWAY_IP}:{self.settings.ports['kube-apiserver']}"
        write_kubeconfig(kubeconfig, server, self.pki, "real-nodes-coredns")
        configs.write_if_changed(corefile, configs.corefile(layout, kubeconfig))
        return Process(
            "coredns", [str(self.binary("coredns")), "-conf", str(corefile)],
            self.settings.logs_dir / "coredns.log",
            http_ok_in(layout.cluster_netns, f"http://127.0.0.1:{configs.CORE_DNS_READY_PORT}/ready"),
            f"{layout.cgroup}/coredns",
            self.enter(cgroup=f"{layout.cgroup}/coredns", netns=linux.netns_path(layout.cluster_netns)),
            config_files=[corefile])

    def holder(self, node: NodeLayout) -> Process:
        return Process(
            f"{node.name}-holder",
            [sys.executable, "-m", "localcluster.realnodes.holder", f"--netns={node.netns}",
             f"--node-dir={node.dir}"],
            self.settings.logs_dir / f"{node.name}-holder.log",
            lambda: node.path(READY_FILE).exists(), f"{node.cgroup}/system",
            self.enter(cgroup=f"{node.cgroup}/system"),
            env={"PYTHONPATH": str(REPO_DIR)})

    def holder_pid(self, node: NodeLayout) -> int:
        pid = ProcessRecord(self.settings.run_dir, f"{node.name}-holder").running_pid()
        if pid is None:
            raise RealNodeError(f"{node.name}: its holder process is not running")
        return pid

    def containerd_address(self, node: NodeLayout) -> Path:
        """The node's containerd socket as the machine reaches it: through the holder's root."""
        return Path(f"/proc/{self.holder_pid(node)}/root{node.containerd_socket}")

    def in_node(self, node: NodeLayout) -> Callable[[], None]:
        """preexec: join the node's cgroup, then the holder's mount and network namespaces."""
        holder = self.holder_pid(node)
        return self.enter(cgroup=f"{node.cgroup}/system", netns=Path(f"/proc/{holder}/ns/net"),
                          mntns=Path(f"/proc/{holder}/ns/mnt"), cwd=node.dir)

    @staticmethod
    def enter(cgroup: str, netns: Path | None = None, mntns: Path | None = None,
              cwd: Path | None = None) -> Callable[[], None]:
        # Opened before the fork: after setns into the mount namespace, /proc/<holder> still
        # resolves, but the cgroup folders must be joined first either way.
        def preexec() -> None:
            linux.join_cgroup(cgroup)
            if netns is not None:
                linux.setns(netns, linux.CLONE_NEWNET)
            if mntns is not None:
                linux.setns(mntns, linux.CLONE_NEWNS)
            if cwd is not None:
                os.chdir(cwd)
        return preexec

    def containerd(self, node: NodeLayout) -> Process:
        config = node.path("containerd.toml")
        return Process(
            f"{node.name}-containerd", ["containerd", f"--config={config}"],
            self.settings.logs_dir / f"{node.name}-containerd.log",
            lambda: subprocess.run(["ctr", "--address", str(self.containerd_address(node)), "version"],
                                   capture_output=True, check=False).returncode == 0,
            f"{node.cgroup}/system", self.in_node(node), config_files=[config])

    def kubelet(self, node: NodeLayout) -> Process:
        config = node.path("kubelet.yaml")
        return Process(
            f"{node.name}-kubelet",
            configs.kubelet_args(node, self.binary("kubelet"), node.path("kubelet.kubeconfig"), config),
            self.settings.logs_dir / f"{node.name}-kubelet.log",
            http_ok_in(node.netns, f"http://127.0.0.1:{configs.KUBELET_HEALTHZ_PORT}/healthz"),
            f"{node.cgroup}/system", self.in_node(node), config_files=[config])

    def kube_proxy(self, node: NodeLayout) -> Process:
        config = node.path("kube-proxy.yaml")
        return Process(
            f"{node.name}-kube-proxy", [str(self.binary("kube-proxy")), f"--config={config}", "--v=1"],
            self.settings.logs_dir / f"{node.name}-kube-proxy.log",
            http_ok_in(node.netns, f"http://127.0.0.1:{configs.KUBE_PROXY_HEALTHZ_PORT}/healthz"),
            f"{node.cgroup}/system", self.in_node(node), config_files=[config])

    def ensure_process(self, process: Process) -> None:
        record = ProcessRecord(self.settings.run_dir, process.name)
        fingerprint = code_fingerprint(process.argv, process.config_files)
        pid = record.running_pid()
        if pid is not None and record.recorded_fingerprint() != fingerprint:
            log(f"{process.name}: pid {pid} runs an older binary or configuration; restarting it")
            record.stop()
            pid = None
        if pid is None:
            linux.make_cgroup(process.cgroup)
            env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
            env.update(process.env)
            pid = record.start(process.argv, process.log_file, env=env, cwd=self.settings.state_dir,
                               fingerprint=fingerprint, preexec_fn=process.preexec)
            log(f"{process.name}: started (pid {pid}, log {process.log_file})")
        deadline = time.monotonic() + self.settings.wait_timeout_s
        while not process.healthy():
            if record.running_pid() is None:
                raise RealNodeError(f"{process.name} exited; last lines of {process.log_file}:\n"
                                    + tail(process.log_file))
            if time.monotonic() > deadline:
                raise RealNodeError(f"timed out after {self.settings.wait_timeout_s:.0f}s waiting for "
                                    f"{process.name} to be healthy; last lines of {process.log_file}:\n"
                                    + tail(process.log_file, 5))
            time.sleep(0.2)

    def process_names(self) -> list[str]:
        names = ["netd", "registry", "coredns"]
        for node in self.nodes():
            names += [f"{node.name}-{part}" for part in ("holder", "containerd", "kubelet", "kube-proxy")]
        return names

    def stop_process(self, name: str) -> bool:
        """Stops one process (fault tests: a containerd or kubelet that dies); `up` starts it again."""
        if name not in self.process_names():
            raise RealNodeError(f"no real-node process {name!r}; they are {', '.join(self.process_names())}")
        return ProcessRecord(self.settings.run_dir, name).stop(grace_s=0)

    def status_rows(self) -> list[dict[str, Any]]:
        """netd, CoreDNS and each node's processes while real nodes are wanted; none otherwise (a
        cluster without real nodes runs neither, and `status` must not call it unhealthy for that)."""
        if self.wanted() == 0:
            return []
        rows = []
        for name in self.process_names():
            pid = ProcessRecord(self.settings.run_dir, name).running_pid()
            port = self.settings.ports["registry"] if name == "registry" else None
            rows.append({"name": name, "pid": pid, "port": port, "healthy": pid is not None})
        return rows

    # ---- the API's view -------------------------------------------------------------------------

    def bootstrap_api(self, api: ApiClient) -> None:
        """The `kubernetes` Service's endpoint (the API forwarder), the cluster DNS Service and
        CoreDNS's permissions. The API server runs with --endpoint-reconciler-type=none: these
        endpoints are ours."""
        port = self.settings.ports["kube-apiserver"]
        self.selectorless_endpoints(api, "default", "kubernetes", [("https", port, "TCP")])
        api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": DNS_SERVICE_IP, "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}}, FIELD_MANAGER)
        self.selectorless_endpoints(api, "kube-system", "kube-dns", [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")])
        rules = [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                  "verbs": ["list", "watch"]},
                 {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
        api.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": COREDNS_USER}, "rules": rules}, FIELD_MANAGER)
        api.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": COREDNS_USER},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}]},
                  FIELD_MANAGER)

    def prefer_real_nodes(self, api: ApiClient) -> None:
        """With real nodes, the kwok nodes carry a PreferNoSchedule taint: a pod that names no node
        type (an MPIJob's launcher) goes to a real node, where the cluster network is; a pod that
        selects kwok nodes still runs there. Without real nodes the taint goes."""
        from localcluster.emulation.nodes import managed_nodes
        wanted = self.wanted() > 0
        for node in managed_nodes(api):
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != STAND_IN_TAINT["key"]]
            if wanted:
                taints.append(STAND_IN_TAINT)
            if taints != (node["spec"].get("taints") or []):
                api.merge_patch("Node", node["metadata"]["name"], {"spec": {"taints": taints}})

    @staticmethod
    def selectorless_endpoints(api: ApiClient, namespace: str, service: str,
                               ports: list[tuple[str, int, str]]) -> None:
        """Endpoints and EndpointSlice of a Service without selector, at the gateway address."""
        api.apply({"apiVersion": "v1", "kind": "Endpoints", "metadata": {
            "name": service, "namespace": namespace,
            # The mirroring controller would make a second slice; ours is below.
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": GATEWAY_IP}],
                         "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports]}]},
            FIELD_MANAGER)
        api.apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {
            "name": service, "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [GATEWAY_IP], "conditions": {"ready": True}}],
            "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports]}, FIELD_MANAGER)

    def wait_ready(self, api: ApiClient) -> None:
        from localcluster.emulation.nodes import node_accepts_pods
        names = [n.name for n in self.nodes()]

        def not_ready() -> list[str]:
            return [name for name in names if not node_accepts_pods(api.get_or_none("Node", name) or {})]

        wait_until(lambda: not not_ready(), self.settings.wait_timeout_s, "the real nodes to be Ready",
                   lambda: f"not Ready: {', '.join(not_ready())}")

    def remove_extra_nodes(self, api: ApiClient | None, count: int) -> None:
        """Tears down real nodes beyond `count` (from a larger `up --real-nodes`) and their Node objects."""
        existing = set()
        if self.layout.root.is_dir():
            for folder in self.layout.root.iterdir():
                with contextlib.suppress(ValueError):
                    existing.add(node_index(folder.name))
        if api is not None:
            with contextlib.suppress(ApiError, OSError):
                for item in api.get("Node", labelSelector=REAL_NODE_LABEL)["items"]:
                    with contextlib.suppress(ValueError):
                        existing.add(node_index(item["metadata"]["name"]))
        for index in sorted(i for i in existing if i >= count):
            node = self.layout.node(index)
            self.teardown_node(node)
            if api is not None:
                with contextlib.suppress(ApiError, OSError):
                    api.delete("Node", node.name)
            shutil.rmtree(node.dir, ignore_errors=True)
            log(f"{node.name}: removed")
        if count == 0 and existing:
            self.teardown()
        if count == 0 and api is not None:
            with contextlib.suppress(ApiError, OSError):
                self.prefer_real_nodes(api)

    # ---- down -----------------------------------------------------------------------------------

    def teardown_node(self, node: NodeLayout) -> None:
        """Kills every process of the node (its containers included), deletes its namespace and cgroups."""
        from localcluster.realnodes.cleanup import remove_everything_under
        remove_everything_under(cgroup=node.cgroup, namespaces=[node.netns], mount_root=node.dir)
        for part in ("holder", "containerd", "kubelet", "kube-proxy"):
            ProcessRecord(self.settings.run_dir, f"{node.name}-{part}").stop(grace_s=0)
        node.path(READY_FILE).unlink(missing_ok=True)

    def teardown(self) -> list[str]:
        """Everything of the cluster's real nodes, crash leftovers included; returns what it removed."""
        from localcluster.realnodes.cleanup import remove_everything_under
        removed = remove_everything_under(cgroup=self.layout.cgroup,
                                          namespaces=network.cluster_namespaces(self.layout),
                                          mount_root=self.settings.state_dir)
        for name in self.process_names():
            ProcessRecord(self.settings.run_dir, name).stop(grace_s=0)
        self.layout.netd_socket.unlink(missing_ok=True)
        if network.remove_netns_dir_if_made(self.layout):
            removed.append(str(linux.NETNS_DIR))
        return removed


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
