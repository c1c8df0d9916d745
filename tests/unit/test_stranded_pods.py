"""Clean-up of a namespace whose pods sit on a node that is not Ready (issue 34): they are named for
forced deletion, so the namespace does not hold the exit for NAMESPACE_DELETE_SECONDS."""

from __future__ import annotations

from typing import Any

from harness.cluster.resources import NODE, POD, Resource
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
