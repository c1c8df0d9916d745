"""Integration fixtures: the local cluster (hack/local-cluster), a namespace per test, diagnostics.

- `cluster` (session): brings the local cluster up once (`hack/local-cluster up`) and yields a
  `LocalCluster` handle (kubeconfig path, API clients, node controls). It brings the cluster down
  at the end only if this session started it, and never with KT2T_KEEP_CLUSTER=1.
- `real_nodes` (session): the same cluster with 2 real nodes (kubelet + containerd each, instance
  type container-cpu) beside the kwok nodes (`hack/local-cluster up --real-nodes 2`); skips the
  test, saying why, where real nodes cannot run (not root).
- `namespace` (per test): a fresh namespace whose `default` ServiceAccount exists; deleted after
  the test unless KT2T_KEEP_NAMESPACES=1.
- On a test failure the pods (status), events and container logs of its namespace are appended
  to the failure report and written to `$ARTIFACTS/integration/<test>/diagnostics.txt`
  (default `_artifacts/`).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream
from polling import wait_for  # the integration tests import it from here too

REPO = Path(__file__).resolve().parents[2]
LOCAL_CLUSTER = REPO / "hack" / "local-cluster"
DEFAULT_NODE_SHAPE = ("cpu", 2, 0)
# Annotations the local cluster's node agent reads: canned logs and injected faults (hack/README.md).
INJECT = "kubetest2-training.local/"
# Ranks 0 and 1 of the upstream 32-rank run: the default nodes' world size (2 CPU nodes x 1 process);
# the verdict fails a log with ranks beyond the job's world size.
DEFAULT_CANNED_LOG = "bert-mpirun-2ranks"
# The local cluster's nodes have the project's images imported, from no registry: every binary these
# tests start (they inherit this environment) keeps IfNotPresent, not upstream's Always.
os.environ.setdefault("IMAGE_PULL_POLICY", "IfNotPresent")


def canned_by_default(annotations: dict[str, str] | None) -> dict[str, str]:
    """kwok's stages and canned lines, not real execution: a pod without a `fail` annotation gets
    the canned log `bert-mpirun-2ranks` unless it names one."""
    annotations = dict(annotations or {})
    if INJECT + "fail" not in annotations:
        annotations.setdefault(INJECT + "canned-log", DEFAULT_CANNED_LOG)
    return annotations


def run_local_cluster(*args: str, env: dict[str, str] | None = None, timeout_s: float = 3600) -> str:
    """Runs hack/local-cluster; returns its stdout; fails the test with stderr when it fails."""
    result = subprocess.run([str(LOCAL_CLUSTER), *args], capture_output=True, text=True, env=env,
                            timeout=timeout_s, check=False)
    if result.returncode != 0:
        pytest.fail(f"hack/local-cluster {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result.stdout


@dataclass
class LocalCluster:
    """Handle on the running local cluster, as the `cluster` fixture yields it."""

    kubeconfig: Path
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def set_nodes(self, shape: str, count: int, efa: int = 0) -> None:
        """Replaces the fake nodes (`hack/local-cluster nodes`); returns once they are Ready."""
        run_local_cluster("nodes", "--shape", shape, "--count", str(count), "--efa", str(efa))

    def set_node_ready(self, node: str, ready: bool) -> None:
        """Turns a node NotReady (kwok stage) or Ready again; returns once the node says so."""
        run_local_cluster("node-ready" if ready else "node-not-ready", node)

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        """Runs kubectl on this cluster; returns its stdout; fails the test with stderr when it fails."""
        done = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], capture_output=True,
                              text=True, timeout=120, check=False, input=input_text)
        if done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def taint(self, node: str, taint: str) -> None:
        """`kubectl taint nodes <node> key=value:Effect` (a trailing `-` removes it)."""
        self.kubectl("taint", "nodes", node, taint)

    def set_node_slow(self, node: str, fraction: float | None) -> None:
        """Slows a node's pods down by `fraction` (`hack/local-cluster node-slow`), None: full speed."""
        run_local_cluster("node-slow", node, "off" if fraction is None else str(fraction))

    def set_node_cpus(self, node: str, cores: float | None) -> None:
        """Gives a node's pods `cores` of the machine's (`hack/local-cluster node-cpus`), None: all."""
        run_local_cluster("node-cpus", node, "off" if cores is None else str(cores))


HACK_IMAGES = REPO / "hack" / "images"


def image_on_real_nodes(name: str) -> str:
    """Builds (or reuses: cached by its inputs) an image with hack/images, imports it into the real
    nodes; its reference."""
    if not HACK_IMAGES.exists():
        pytest.skip("hack/images is not in this checkout: the images cannot be built")
    built = subprocess.run([str(HACK_IMAGES), "build", name], capture_output=True, text=True, timeout=3600,
                           check=False)
    assert built.returncode == 0, f"hack/images build {name}:\n{built.stderr[-4000:]}"
    archive = built.stdout.strip().splitlines()[-1]
    run_local_cluster("load-image", archive)
    return subprocess.run([str(HACK_IMAGES), "name", name], capture_output=True, text=True, check=True).stdout.strip()


def exec_in(cluster: LocalCluster, pod: client.V1Pod, command: str) -> str:
    """`sh -c command` in the pod's container, its output (stdout and stderr)."""
    return str(stream(cluster.core.connect_get_namespaced_pod_exec, pod.metadata.name, pod.metadata.namespace,
                      command=["sh", "-c", command], stderr=True, stdin=False, stdout=True, tty=False))


def cluster_is_running() -> bool:
    return subprocess.run([str(LOCAL_CLUSTER), "status"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    started_here = not cluster_is_running()
    kubeconfig = Path(run_local_cluster("up").strip().splitlines()[-1])
    assert kubeconfig.is_absolute(), f"hack/local-cluster up printed {kubeconfig}, not an absolute path"
    api = config.new_client_from_config(config_file=str(kubeconfig))
    handle = LocalCluster(kubeconfig, api)
    try:
        yield handle
    finally:
        api.close()
        if started_here and os.environ.get("KT2T_KEEP_CLUSTER") != "1":
            run_local_cluster("down")


REAL_NODE_COUNT = 2
REAL_NODE_TYPE = "container-cpu"


@pytest.fixture(scope="session")
def real_nodes(cluster: LocalCluster) -> LocalCluster:
    """The cluster with its real nodes up (idempotent: a second `up` only checks them)."""
    if os.geteuid() != 0:
        pytest.skip("real nodes need root (network namespaces, mounts, cgroups, containerd)")
    run_local_cluster("up", "--real-nodes", str(REAL_NODE_COUNT))
    return cluster


def real_node_names(cluster: LocalCluster) -> list[str]:
    nodes = cluster.core.list_node(label_selector=f"node.kubernetes.io/instance-type={REAL_NODE_TYPE}").items
    return sorted(n.metadata.name for n in nodes)


@pytest.fixture
def default_nodes(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """For tests that change the nodes: starts from the default nodes (2 cpu) and puts back the
    nodes that were there before (same shape, count, EFA) afterwards."""
    before = ensure_default_nodes(cluster)
    try:
        yield cluster
    finally:
        if _node_shape(cluster) != before:
            cluster.set_nodes(*before)


@pytest.fixture
def p5_nodes(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Two kwok p5.48xlarge nodes (8 GPUs, canned GPU output) for one test; the default nodes after."""
    cluster.set_nodes("p5", 2)
    try:
        yield cluster
    finally:
        ensure_default_nodes(cluster)


def ensure_default_nodes(cluster: LocalCluster) -> tuple[str, int, int]:
    """Replace the nodes by the default ones (2 cpu) unless they are; returns the shape before."""
    before = _node_shape(cluster)
    if before != DEFAULT_NODE_SHAPE:
        cluster.set_nodes(*DEFAULT_NODE_SHAPE)
    return before


def _node_shape(cluster: LocalCluster) -> tuple[str, int, int]:
    """(shape, count, EFA per node) of the nodes hack/local-cluster made."""
    nodes = cluster.core.list_node(label_selector="kubetest2-training.local/node").items
    if not nodes:
        return DEFAULT_NODE_SHAPE
    efa = int(nodes[0].status.capacity.get("vpc.amazonaws.com/efa", "0"))
    return nodes[0].metadata.labels["kubetest2-training.local/node"], len(nodes), efa


@pytest.fixture
def namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"it-{re.sub(r'[^a-z0-9]+', '-', request.node.name.lower())[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    core = cluster.core
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"app.kubernetes.io/managed-by": "kubetest2-training-integration"})))
    # Pods are rejected until the namespace's `default` ServiceAccount exists.
    wait_for(lambda: _service_account_exists(core, name), 60, f"ServiceAccount {name}/default")
    try:
        yield name
    finally:
        if os.environ.get("KT2T_KEEP_NAMESPACES") != "1":
            core.delete_namespace(name, propagation_policy="Background")


def _service_account_exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except ApiException as error:
        if error.status == 404:
            return False
        raise


def watch_pods(core: client.CoreV1Api, namespace: str, until: Callable[[client.V1Pod], bool],
               timeout_s: float, what: str, label_selector: str = "") -> client.V1Pod:
    """Watches the namespace's pods until one satisfies `until`; returns it (fails on timeout).

    Lists first (the pod may already be there), then watches from the list's version.
    """
    last_seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    pods = core.list_namespaced_pod(namespace, label_selector=label_selector)
    for pod in pods.items:
        if until(pod):
            return pod
    version = pods.metadata.resource_version
    while time.monotonic() < deadline:
        stream = watch.Watch()
        remaining = max(1, int(deadline - time.monotonic()))
        for event in stream.stream(core.list_namespaced_pod, namespace, label_selector=label_selector,
                                   resource_version=version, timeout_seconds=remaining):
            pod = event["object"]
            version = pod.metadata.resource_version
            last_seen[pod.metadata.name] = describe_pod(pod)
            if event["type"] != "DELETED" and until(pod):
                stream.stop()
                return pod
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}; last seen: {last_seen}")


def describe_pod(pod: client.V1Pod) -> str:
    """One line: phase, node and each container's state, for messages and diagnostics."""
    states = []
    for status in pod.status.container_statuses or []:
        state = status.state
        if state.terminated:
            detail = f"terminated {state.terminated.reason} exit={state.terminated.exit_code}"
        elif state.waiting:
            detail = f"waiting {state.waiting.reason}"
        else:
            detail = "running" if state.running else "unknown"
        states.append(f"{status.name}: {detail} restarts={status.restart_count}")
    return f"phase={pod.status.phase} node={pod.spec.node_name} [{'; '.join(states)}]"


# ---- diagnostics on failure ----------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    namespace = item.funcargs.get("namespace") if hasattr(item, "funcargs") else None
    if not isinstance(cluster, LocalCluster) or not isinstance(namespace, str):
        return
    try:
        text = collect_diagnostics(cluster, namespace)
    except Exception as error:  # diagnostics must never hide the test's own failure
        text = f"(collecting diagnostics failed: {error!r})"
    report.sections.append((f"diagnostics of namespace {namespace}", text))
    artifacts = Path(os.environ.get("ARTIFACTS", REPO / "_artifacts")) / "integration"
    target = artifacts / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name)
    target.mkdir(parents=True, exist_ok=True)
    (target / "diagnostics.txt").write_text(text)


def collect_diagnostics(cluster: LocalCluster, namespace: str) -> str:
    """Pods with their state, the namespace's events in order, and every container's log."""
    core = cluster.core
    lines = [f"== pods in {namespace}"]
    pods = core.list_namespaced_pod(namespace).items
    for pod in pods:
        lines.append(f"{pod.metadata.name}: {describe_pod(pod)}")
        for condition in pod.status.conditions or []:
            if condition.status != "True":
                lines.append(f"  condition {condition.type}={condition.status} {condition.reason or ''} "
                             f"{condition.message or ''}")
    lines.append(f"== events in {namespace}")
    events = core.list_namespaced_event(namespace).items
    events.sort(key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
    for event in events:
        involved = f"{event.involved_object.kind}/{event.involved_object.name}"
        lines.append(f"{event.type} {event.reason} {involved}: {event.message}")
    for pod in pods:
        for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
            lines.append(f"== log of {pod.metadata.name} container {container.name} (last 50 lines)")
            try:
                log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container.name,
                                                   tail_lines=50)
                lines.append(log or "(empty log)")
            except ApiException as error:
                lines.append(f"(no log: {error.status} {error.reason})")
    return "\n".join(lines)
