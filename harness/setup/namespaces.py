"""The test's namespace: --namespace as given, else a new one per run and test, deleted after it."""

from __future__ import annotations

import hashlib
import re
import time

from harness.cluster.client import Cluster
from harness.cluster.conditions import deleted
from harness.cluster.labels import base_labels
from harness.cluster.pods import node_of, true_condition
from harness.cluster.resources import NAMESPACE, NODE, POD
from harness.cluster.wait import wait_for
from harness.errors import Interrupted, WaitTimeout
from harness.framework.context import TestContext

# How long teardown waits for a test namespace to go before leaving it to the API server.
NAMESPACE_DELETE_SECONDS = 120.0


def namespace_name(run_id: str, test_name: str) -> str:
    """kt2t-<run id>-<test>: leftovers of an interrupted run are easy to find. A name too long for a
    namespace is cut and ends with a digest of the whole, so two tests (or two -test.count runs of
    one) never share a namespace."""
    test = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
    run = re.sub(r"[^a-z0-9]+", "", run_id.lower())[:8] or "run"
    name = f"kt2t-{run}-{test}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(test_name.encode()).hexdigest()[:6]
    return f"{name[:56].rstrip('-')}-{digest}"


def namespace_for(t: TestContext) -> str:
    """The namespace the test's objects go in, created (with the managed-by label, for
    `python -m harness.cleanup`) on first use; its deletion is registered as teardown."""
    if t.namespace_name is not None:
        return t.namespace_name
    if t.cfg.namespace is not None:
        t.namespace_name = t.cfg.namespace
        return t.cfg.namespace
    name = namespace_name(t.cfg.run_id, t.instance)
    t.cluster.ensure_namespace(name, base_labels(t.cfg.run_id, t.name))
    t.namespace_name = name
    t.cleanup(lambda: _delete_or_keep_namespace(t, name), f"delete namespace {name}")
    return name


def _delete_or_keep_namespace(t: TestContext, name: str) -> None:
    if t.keeps_resources():
        t.logf("namespace %s left in place (KEEP_RESOURCES, --disable-graceful-teardown, or --fail-fast after a "
               "failure)", name)
    else:
        _delete_namespace(t, name)


def stranded_pods(cluster: Cluster, namespace: str) -> list[tuple[str, str]]:
    """(pod, node) for each pod of the namespace on a node that is not Ready: no kubelet (or no
    container runtime) will ever confirm its end, so its namespace would stay Terminating."""
    nodes = {node["metadata"]["name"]: node for node in cluster.list(NODE).get("items", [])}
    stranded = []
    for pod in cluster.list(POD, namespace).get("items", []):
        node = node_of(pod)
        if node in nodes and true_condition(nodes[node], "Ready") is None:
            stranded.append((pod["metadata"]["name"], node))
    return stranded


def _delete_namespace(t: TestContext, name: str) -> None:
    started = time.monotonic()
    t.cluster.delete(NAMESPACE, name)
    # A fault test's NotReady node held its pods Terminating for all of NAMESPACE_DELETE_SECONDS
    # (issue 34: the verdict came 31 s after the fault, the exit 151 s): forced, as `kubectl
    # delete --force` and the node lifecycle controller (much later) would.
    for pod, node in stranded_pods(t.cluster, name):
        t.logf("pod %s deleted without waiting for node %s, which is not Ready", pod, node)
        t.cluster.delete(POD, pod, name, grace_s=0)
    try:
        wait_for(t.cluster, deleted(NAMESPACE, name), timeout=NAMESPACE_DELETE_SECONDS, cancel=t.cancel)
        t.logf("namespace %s deleted in %.1fs", name, time.monotonic() - started)
    except WaitTimeout:
        t.logf("namespace %s still terminating after %.0fs; left to the API server", name,
               NAMESPACE_DELETE_SECONDS)
    except Interrupted:
        t.logf("namespace %s deleted without waiting (the run was cancelled)", name)
