"""Real nodes of the local cluster (localcluster/realnodes/): kubelet and containerd in network
namespaces of the cluster's own, pods in containers of the busybox test image, the network between them
(pods across nodes, Services through kube-proxy, CoreDNS, the API server through the `kubernetes`
Service), the host reaching them only through the API server, and nothing leaving the cluster network.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from ..conftest import (
    REPO,
    LocalCluster,
    image_in_registry,
    real_node_names,
    run_local_cluster,
    wait_for,
    watch_pods,
)

sys.path.insert(0, str(REPO))
from localcluster.base.layout import ClusterLayout

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

TEST_IMAGE = "kubetest2-training.local/busybox:local"


def pod(name: str, node: str, script: str, labels: dict[str, str] | None = None, hostname: str = "",
        subdomain: str = "", restart: str = "Never", image: str = TEST_IMAGE,
        pull: str = "Never") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                 **({"hostname": hostname} if hostname else {}), **({"subdomain": subdomain} if subdomain else {}),
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": pull,
                                 "command": ["sh", "-c", script]}]},
    }


def phase_in(*phases: str):
    return lambda p: p.status.phase in phases


def run_to_end(cluster: LocalCluster, namespace: str, manifest: dict[str, Any],
               timeout_s: float = 90) -> tuple[str, str]:
    """Creates the pod, waits until it ends; returns (phase, log)."""
    cluster.core.create_namespaced_pod(namespace, manifest)
    name = manifest["metadata"]["name"]
    ended = watch_pods(cluster.core, namespace,
                       lambda p: p.metadata.name == name and phase_in("Succeeded", "Failed")(p),
                       timeout_s, f"pod {name} to end")
    return ended.status.phase, cluster.core.read_namespaced_pod_log(name, namespace)


def test_real_nodes_are_ready_with_their_own_address_and_instance_type(real_nodes: LocalCluster):
    names = real_node_names(real_nodes)
    assert names == ["real-cpu-0", "real-cpu-1"]
    for name in names:
        node = real_nodes.core.read_node(name)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        addresses = {a.type: a.address for a in node.status.addresses}
        assert addresses["InternalIP"].startswith("10.250.0."), addresses
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        assert node.status.node_info.kubelet_version == "v1.34.4"


def test_a_pod_runs_in_containerd_and_its_log_and_exec_reach_the_host(real_nodes: LocalCluster, namespace: str):
    node = real_node_names(real_nodes)[0]
    real_nodes.core.create_namespaced_pod(namespace, pod("hello", node, "echo hello from $(hostname); sleep 300"))
    running = watch_pods(real_nodes.core, namespace, phase_in("Running"), 90, "pod hello to run")
    assert running.status.container_statuses[0].container_id.startswith("containerd://")
    assert running.status.pod_ip.startswith("10.245.0."), running.status.pod_ip
    # The API server reaches the kubelet through netd (egress selector) for both.
    wait_for(lambda: "hello from hello" in real_nodes.core.read_namespaced_pod_log("hello", namespace), 60,
             "the pod's log through the API server")  # a deadline for a hang (was 20 s: a loaded host's guess)
    out = stream(real_nodes.core.connect_get_namespaced_pod_exec, "hello", namespace,
                 command=["sh", "-c", "echo exec in $(hostname) pid1=$(cat /proc/1/cmdline | tr '\\0' ' ')"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    assert "exec in hello pid1=sleep 300" in out, out  # busybox sh execs its last command


def test_pods_reach_each_other_across_nodes_by_address_service_and_dns_name(real_nodes: LocalCluster, namespace: str):
    server_node, client_node = real_node_names(real_nodes)
    labels = {"app": "web"}
    real_nodes.core.create_namespaced_service(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}})
    real_nodes.core.create_namespaced_service(namespace, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "workers"},
        "spec": {"selector": labels, "clusterIP": "None", "ports": [{"port": 8080}]}})
    real_nodes.core.create_namespaced_pod(namespace, pod(
        "web", server_node,
        "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www",
        labels=labels, hostname="web-0", subdomain="workers"))
    web = watch_pods(real_nodes.core, namespace, lambda p: p.metadata.name == "web" and p.status.phase == "Running"
                     and all(c.ready for c in p.status.container_statuses or [{}]), 90, "web to run")
    targets = {
        "pod address": f"{web.status.pod_ip}:8080",
        "service name": "web:80",
        "service FQDN": f"web.{namespace}.svc.cluster.local:80",
        "headless pod name": f"web-0.workers.{namespace}.svc.cluster.local:8080",
    }
    # The test image's busybox is static: its wget (getaddrinfo) cannot resolve names in a container
    # without NSS libraries, so names go through its own resolver (nslookup, which applies
    # resolv.conf's search list for a name without dots only) and the request through nc.
    # A try is repeated for up to 20 s, as a client would: kube-proxy programs a new Service's rules
    # on its node some time after the Service is created, and until then the node answers "Network
    # is unreachable" (it has no route out); CI once ran the client before kube-proxy's sync.
    script = ("fetch() { host=${1%:*}; port=${1##*:}; for try in $(seq 20); do case $host in 10.*) ip=$host;; "
              "*) ip=$(nslookup $host | sed -n 's/^Address: //p' | tail -1);; esac; "
              "got=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 $ip $port | tail -1); "
              "[ -n \"$got\" ] && break; sleep 1; done; echo \"$got\"; }; ")
    script += "; ".join(f"echo {label.replace(' ', '_')}=$(fetch {target})" for label, target in targets.items())
    script += "; cat /etc/resolv.conf"
    phase, log = run_to_end(real_nodes, namespace, pod("client", client_node, script))
    assert phase == "Succeeded", log
    for label in targets:
        assert f"{label.replace(' ', '_')}=served-by-web-0" in log, log
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in log, log
    assert "nameserver 10.96.0.10" in log, log


def test_pods_reach_the_api_server_through_the_kubernetes_service(real_nodes: LocalCluster, namespace: str):
    node = real_node_names(real_nodes)[1]
    script = ("echo host=$KUBERNETES_SERVICE_HOST port=$KUBERNETES_SERVICE_PORT; "
              "echo | nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT && echo connected; "
              "nslookup kubernetes.default.svc.cluster.local | grep -A1 Name")
    _, log = run_to_end(real_nodes, namespace, pod("api", node, script))
    assert "host=10.96.0.1 port=443" in log, log
    assert "connected" in log, log
    assert "10.96.0.1" in log.split("Name", 1)[-1], log


def test_nothing_leaves_the_cluster_network(real_nodes: LocalCluster, namespace: str):
    """A pod has a route to its node only; the node none to the machine or beyond; the machine's own
    namespace got no interface, and every listener of the cluster on the machine is on 127.0.0.1."""
    node = real_node_names(real_nodes)[0]
    outside = ["1.1.1.1", "8.8.8.8", "169.254.169.254", *_machine_addresses()]
    script = "; ".join(f"echo {ip}: $(echo | nc -w 2 {ip} 80 2>&1 || echo refused-or-unreachable)" for ip in outside)
    script += "; ip route"
    _, log = run_to_end(real_nodes, namespace, pod("escape", node, script))
    for ip in outside:
        line = next(line for line in log.splitlines() if line.startswith(f"{ip}:"))
        assert "unreachable" in line or "refused-or-unreachable" in line, log
        assert "Connection refused" not in line, f"{ip} answered from inside the cluster network:\n{log}"
    host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert "cni0" not in host_links and "br0" not in host_links, host_links


def _machine_addresses() -> list[str]:
    """The machine's own IPv4 addresses outside loopback (a pod must not reach them)."""
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True).stdout
    addresses = [line.split()[3].split("/")[0] for line in out.splitlines()]
    return [a for a in addresses if not a.startswith("127.")]


def test_the_apiserver_egress_refuses_addresses_outside_the_cluster(real_nodes: LocalCluster):
    """netd, the API server's way in, dials cluster and loopback addresses only."""
    layout = ClusterLayout(Path(real_nodes.kubeconfig).parent)
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(layout.netd_socket))
        conn.sendall(b"CONNECT 1.1.1.1:443 HTTP/1.1\r\nHost: 1.1.1.1:443\r\n\r\n")
        answer = conn.recv(200).decode()
    assert answer.startswith("HTTP/1.1 403"), answer


@pytest.mark.parametrize(("policy", "reasons"), [("Never", {"ErrImageNeverPull"}),
                                                 ("IfNotPresent", {"ErrImagePull", "ImagePullBackOff"})])
def test_an_image_missing_from_the_node_shows_in_seconds_naming_the_image(real_nodes: LocalCluster, namespace: str,
                                                                          policy: str, reasons: set[str]):
    """Nothing can be pulled: the pod waits with the kubelet's reason and a message naming the image
    within seconds (a pull fails at once: no registry is reachable from a node)."""
    missing = "kubetest2-training.local/not-loaded:1"
    node = real_node_names(real_nodes)[0]
    started = time.monotonic()
    real_nodes.core.create_namespaced_pod(namespace, pod("missing", node, "true", image=missing, pull=policy))

    def waiting(p: client.V1Pod) -> bool:
        statuses = p.status.container_statuses or []
        return bool(statuses and statuses[0].state.waiting and statuses[0].state.waiting.reason in reasons)

    stuck = watch_pods(real_nodes.core, namespace, waiting, 30, f"the pod to wait with {' or '.join(reasons)}")
    assert time.monotonic() - started < 30
    assert missing in (stuck.status.container_statuses[0].state.waiting.message or ""), stuck.status


def pull_events(cluster: LocalCluster, namespace: str, pod_name: str) -> list[str]:
    """The kubelet's events of one pod (Pulling, Pulled, Failed, BackOff), oldest first."""
    events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod_name}").items
    return [f"{e.reason}: {e.message}" for e in sorted(events, key=lambda e: e.metadata.creation_timestamp)]


@pytest.mark.images
def test_a_pod_pulls_its_image_by_name_from_the_clusters_registry(real_nodes: LocalCluster, namespace: str):
    """`hack/images push` puts the pause image (small: the workloads image is the main job's) in the
    cluster's registry; a pod naming it with Always pulls it on the node, as on any cluster."""
    image = image_in_registry("pause")
    assert image.startswith(run_local_cluster("registry").strip() + "/"), image
    node = real_node_names(real_nodes)[1]
    real_nodes.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pulled"},
        "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": image, "imagePullPolicy": "Always"}]}})
    watch_pods(real_nodes.core, namespace, phase_in("Running"), 90, "the pod of the pushed image to run")

    def pulled() -> list[str] | None:
        events = pull_events(real_nodes, namespace, "pulled")
        return events if any(e.startswith("Pulled: Successfully pulled") for e in events) else None

    events = wait_for(pulled, 30, "the kubelet's Pulled event")
    assert f'Pulling: Pulling image "{image}"' in events, events
    assert any(e.startswith(f'Pulled: Successfully pulled image "{image}"') for e in events), events


@pytest.mark.images
def test_a_tag_the_registry_lacks_shows_as_the_pull_error_naming_the_image(real_nodes: LocalCluster,
                                                                           namespace: str):
    """The repository is there, the tag is not: the registry answers 404, and the pod waits with
    ErrImagePull or ImagePullBackOff and a message naming the image (NotFound) within seconds."""
    missing = image_in_registry("pause").rsplit(":", 1)[0] + ":no-such-tag"
    node = real_node_names(real_nodes)[0]
    real_nodes.core.create_namespaced_pod(namespace, pod("untagged", node, "true", image=missing, pull="IfNotPresent"))

    def waiting(p: client.V1Pod) -> bool:
        statuses = p.status.container_statuses or []
        return bool(statuses and statuses[0].state.waiting
                    and statuses[0].state.waiting.reason in ("ErrImagePull", "ImagePullBackOff"))

    stuck = watch_pods(real_nodes.core, namespace, waiting, 30, "the pod to wait with ErrImagePull")
    message = stuck.status.container_statuses[0].state.waiting.message or ""
    assert missing in message and "not found" in message, stuck.status


def node_ready(cluster: LocalCluster, name: str) -> tuple[bool, str]:
    (condition,) = [c for c in cluster.core.read_node(name).status.conditions if c.type == "Ready"]
    return condition.status == "True", f"{condition.reason}: {condition.message}"


@pytest.mark.parametrize("process", ["containerd", "kubelet"])
def test_a_dead_containerd_or_kubelet_makes_its_node_not_ready_and_up_repairs_it(real_nodes: LocalCluster,
                                                                                process: str):
    """containerd: kubelet reports the runtime down at once; kubelet: the node controller marks the
    node NotReady once its lease is not renewed (its grace period). `up` starts the process again."""
    node = real_node_names(real_nodes)[1]
    run_local_cluster("stop", f"{node}-{process}")
    try:
        started = time.monotonic()
        wait_for(lambda: not node_ready(real_nodes, node)[0], 120, f"{node} to turn NotReady without {process}")
        took = time.monotonic() - started
        print(f"{node} NotReady {took:.0f}s after {process} died: {node_ready(real_nodes, node)[1]}")
        if process == "containerd":
            assert "container runtime" in node_ready(real_nodes, node)[1]
    finally:
        run_local_cluster("up")
    assert node_ready(real_nodes, node)[0]
