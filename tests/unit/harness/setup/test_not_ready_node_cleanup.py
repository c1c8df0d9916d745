"""A node that is not Ready holds no exit (issue 34): its pods are named for forced deletion at
clean-up, and its kubelet's missing logs are not retried as an API server outage."""

from __future__ import annotations

from typing import Any

from harness.cluster.client import is_transient, kubelet_unreachable
from harness.cluster.resources import NODE, POD, Resource
from harness.errors import ApiError
from harness.setup.namespaces import stranded_pods


def node(name: str, ready: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def pod(name: str, node_name: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": node_name} if node_name else {}}


class Listing:
    """The two lists stranded_pods reads."""

    def list(self, resource: Resource, namespace: str | None = None) -> dict[str, Any]:
        if resource is NODE:
            return {"items": [node("up", "True"), node("down", "Unknown"), node("runtime-down", "False")]}
        assert resource is POD and namespace == "ns"
        return {"items": [pod("a", "up"), pod("b", "down"), pod("c", "runtime-down"), pod("d", None),
                          pod("e", "removed")]}


def test_only_pods_on_a_node_that_is_not_ready_are_stranded():
    assert stranded_pods(Listing(), "ns") == [("b", "down"), ("c", "runtime-down")]  # type: ignore[arg-type]


def test_a_log_the_nodes_kubelet_cannot_give_is_not_retried_as_an_api_server_outage():
    """Issue 34, kubelet stopped: the API server's 500 naming the kubelet's containerLogs URL is the
    node's failure (the log file says so); a 503 of the API server itself is still retried."""
    stopped = ApiError(500, "Internal Server Error", b'{"message": "Get \\"https://10.250.0.10:10250/containerLogs/'
                                                      b'ns/w-1/worker\\": proxy error ... 502 Bad Gateway"}')
    assert kubelet_unreachable(stopped) and not is_transient(stopped)
    overloaded = ApiError(503, "Service Unavailable", b"")
    assert is_transient(overloaded) and not kubelet_unreachable(overloaded)
