"""A minimal Kubernetes REST client over the standard library (mutual TLS on 127.0.0.1).

`hack/local-cluster` runs before the project's venv may exist, so it does not use the
`kubernetes` package; it needs only a handful of calls: get, create, server-side apply, delete,
patch and watch.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIELD_MANAGER = "kubetest2-training-local-cluster"

# Kind -> (path prefix, plural, namespaced) for the objects this package touches.
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Event": ("/api/v1", "events", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Secret": ("/api/v1", "secrets", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "Logs": ("/apis/kwok.x-k8s.io/v1alpha1", "logs", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations",
                                       False),
    "Endpoints": ("/api/v1", "endpoints", True),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    # The DRA stand-in's (localcluster/emulation/dra.py).
    "ResourceSlice": ("/apis/resource.k8s.io/v1", "resourceslices", False),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
}


class ApiError(Exception):
    """A non-2xx answer: carries the HTTP status and the server's message."""

    def __init__(self, operation: str, status: int, message: str) -> None:
        super().__init__(f"{operation}: HTTP {status}: {message}")
        self.status = status


def resource_path(kind: str, name: str = "", namespace: str = "") -> str:
    prefix, plural, namespaced = RESOURCES[kind]
    path = prefix
    if namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    return path


@dataclass(frozen=True)
class ApiClient:
    """Talks to one API server with one client certificate."""

    server: str
    ca_cert: Path
    client_cert: Path
    client_key: Path

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: dict[str, str] | None = None, timeout_s: float = 30) -> Any:
        """Sends one request; returns the decoded JSON answer (None for an empty one)."""
        with self._open(method, path, body, content_type, query, timeout_s) as response:
            data = response.read()
        return json.loads(data) if data else None

    def _open(self, method: str, path: str, body: Any, content_type: str,
              query: dict[str, str] | None, timeout_s: float) -> Any:
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            return urllib.request.urlopen(request, context=self._context(), timeout=timeout_s)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(f"{method} {path}", error.code, detail) from None

    def get(self, kind: str, name: str = "", namespace: str = "", **query: str) -> Any:
        return self.request("GET", resource_path(kind, name, namespace), query=query or None)

    def get_or_none(self, kind: str, name: str, namespace: str = "") -> Any:
        try:
            return self.get(kind, name, namespace)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any]) -> Any:
        namespace = obj["metadata"].get("namespace", "")
        return self.request("POST", resource_path(obj["kind"], namespace=namespace), obj)

    def apply(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER) -> Any:
        """Server-side apply (large CRDs do not fit in a client-side-apply annotation)."""
        meta = obj["metadata"]
        path = resource_path(obj["kind"], meta["name"], meta.get("namespace", ""))
        return self.request("PATCH", path, obj, "application/apply-patch+yaml",
                            {"fieldManager": field_manager, "force": "true"})

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str = "",
                    subresource: str = "") -> Any:
        path = resource_path(kind, name, namespace) + (f"/{subresource}" if subresource else "")
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        try:
            self.request("DELETE", resource_path(kind, name, namespace))
        except ApiError as error:
            if error.status != 404:
                raise

    def watch(self, kind: str, resource_version: str, timeout_s: int = 300) -> Iterator[dict[str, Any]]:
        """Yields watch events (dicts with type and object) until the server ends the watch."""
        query = {"watch": "true", "resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout_s), "allowWatchBookmarks": "true"}
        with self._open("GET", resource_path(kind), None, "", query, timeout_s + 30) as response:
            for line in response:
                if line.strip():
                    yield json.loads(line)

    def list_then_watch(self, kind: str, on_list: Callable[[list[dict[str, Any]]], None],
                        on_event: Callable[[str, dict[str, Any]], None], log: Callable[[str], None]) -> None:
        """An informer, forever: lists (on_list), then watches from the list's version (on_event:
        ADDED, MODIFIED, DELETED); lists again when the watch expires, and after any error."""
        while True:
            try:
                listed = self.get(kind)
                on_list(listed["items"])
                self._follow(kind, listed["metadata"]["resourceVersion"], on_event, log)
            except (ApiError, OSError, ValueError) as error:
                log(f"{kind} watch interrupted: {error}; starting over")
                time.sleep(1)

    def _follow(self, kind: str, resource_version: str, on_event: Callable[[str, dict[str, Any]], None],
                log: Callable[[str], None]) -> None:
        while True:
            for event in self.watch(kind, resource_version):
                event_type, obj = event["type"], event["object"]
                if event_type == "ERROR":  # typically 410 Gone: the version expired; list again
                    log(f"{kind} watch error: {obj.get('message')}")
                    return
                resource_version = obj["metadata"]["resourceVersion"]
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event_type, obj)

    def healthy(self, path: str = "/readyz") -> bool:
        try:
            with self._open("GET", path, None, "", None, 5) as response:
                return bool(response.status == 200)
        except (ApiError, OSError):
            return False
