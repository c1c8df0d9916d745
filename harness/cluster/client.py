"""Cluster operations on the kubernetes client: apply, get, list, watch, delete, namespaces.

Requests go through the client's ApiClient and REST client, so authentication and TLS come from
the kubeconfig; objects are plain dicts (harness.cluster.resources). Transient failures (connection
errors, 429, 5xx) are retried with backoff.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.cluster.resources import KNOWN_RESOURCES, Obj, Resource
from harness.errors import ApiError, ClusterError

if TYPE_CHECKING:
    import urllib3
    from kubernetes import client as k8s_client

# The kubernetes client is imported when a Cluster connects, not at import: it takes ~0.15 s to
# load, and `--help` / `--test.list` (probed by kubetest2 before every run) must not pay for it.
# urllib3 likewise (~0.05 s, a quarter of `--help`'s time; bench/harness_costs.py startup): the
# functions below import it, by then the kubernetes client has loaded it.

log = logging.getLogger(__name__)

FIELD_MANAGER = "kubetest2-training"
T = TypeVar("T")

RETRIABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# Long enough to ride out an API server restart (the wait resumes once it answers again).
RETRY_BUDGET_SECONDS = 90.0
# At start: an unreachable API server is a configuration error within seconds.
CONNECT_RETRY_SECONDS = 5.0
CONNECT_TIMEOUT = 5.0
REQUEST_TIMEOUT = 60.0
STREAM_CHUNK_BYTES = 64 * 1024


def kubelet_unreachable(exc: BaseException) -> bool:
    """The API server answered, but the kubelet it proxies a pod's log to did not (`Get
    "https://<node>:10250/containerLogs/...": ...`): a stopped kubelet or a node gone, which
    retrying the API server does not fix (issue 34: 90 s of retries held a NotReady node's verdict,
    then replaced it with this error)."""
    return isinstance(exc, ApiError) and exc.status >= 500 and "/containerLogs/" in exc.body


def is_transient(exc: BaseException) -> bool:
    """Errors that retrying can fix: overload, server errors, dropped or refused connections."""
    if isinstance(exc, ApiError):
        return exc.status in RETRIABLE_STATUS and not kubelet_unreachable(exc)
    # kubernetes' ApiException(status=0) wraps TLS errors of a server that is (re)starting.
    if type(exc).__name__ == "ApiException" and getattr(exc, "status", None) == 0:
        return True
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def describe_api_error(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"HTTP {exc.status}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


_RAISE = object()  # `_checked`'s "no default": a 404 raises like any other error


DEFAULT_KUBECONFIG = Path("~/.kube/config")


def _pooled(api_client: k8s_client.ApiClient) -> k8s_client.ApiClient:
    """Enough connections for parallel log capture of large jobs."""
    api_client.configuration.connection_pool_maxsize = 64
    api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 64
    return api_client


def _in_cluster_client() -> k8s_client.ApiClient:
    """A client with the pod's ServiceAccount token and CA (refreshed as the kubelet rotates the token);
    outside a pod, a ClusterError that says what was looked for."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException as exc:
        raise ClusterError(f"load kubeconfig: none given (--kubeconfig, KUBECONFIG), no ~/.kube/config, and not "
                           f"in a pod with a ServiceAccount token (in-cluster configuration: {exc})") from None
    return _pooled(k8s_client.ApiClient(configuration))


class Cluster:
    """One API server, reached with a kubeconfig."""

    def __init__(self, api_client: k8s_client.ApiClient, retry_budget: float = RETRY_BUDGET_SECONDS,
                 cancelled: threading.Event | None = None, kubeconfig: str | None = None) -> None:
        self.api = api_client
        self.retry_budget = retry_budget
        # Set when the run is cancelled: retries stop waiting at once.
        self.cancelled = cancelled or threading.Event()
        self.kubeconfig = kubeconfig
        self._discovered: dict[tuple[str, str], Resource] = {}
        self.request_count = 0

    @classmethod
    def connect(cls, kubeconfig: str | None, cancelled: threading.Event | None = None,
                retry_budget: float = RETRY_BUDGET_SECONDS, context: str | None = None) -> Cluster:
        """Load the kubeconfig (its `context`, else its current one); a missing or invalid one, or an
        unknown context, is a ClusterError naming it."""
        from kubernetes import config as k8s_config

        # KUBECONFIG is read here, not left to the client library, which reads it once at import.
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
        if kubeconfig is None and not DEFAULT_KUBECONFIG.expanduser().exists():
            # No --kubeconfig, no KUBECONFIG, no ~/.kube/config: a pod's own ServiceAccount, as
            # upstream's binaries run in the kubetest2 image inside the cluster.
            return cls(_in_cluster_client(), retry_budget, cancelled, None)
        try:
            api_client = k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
        except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
            where = f" context {context}" if context else ""
            raise ClusterError(f"load kubeconfig {kubeconfig or '~/.kube/config'}{where}: {exc}") from None
        return cls(_pooled(api_client), retry_budget, cancelled, kubeconfig)

    def server_version(self) -> str:
        """The API server's gitVersion (GET /version); an unreachable server is a ClusterError
        naming its address and the kubeconfig."""
        try:
            version = self.request("GET", "/version", operation="contact the API server")
        except ClusterError as exc:
            raise ClusterError(f"contact the API server at {self.api.configuration.host} "
                               f"(kubeconfig {self.kubeconfig or '~/.kube/config'}): {exc}") from None
        except Exception as exc:  # a body that is not JSON, and the like
            raise ClusterError(f"contact the API server: {exc}") from None
        return str(version.get("gitVersion", "?"))

    # -- raw requests ----------------------------------------------------------------------------

    def _retrying(self, operation: str, call: Callable[[], T], budget: float | None = None) -> T:
        # Not urllib3's Retry (the client's own): it counts attempts and sleeps uninterruptibly,
        # while riding out an API server restart needs a wall-clock budget and a cancelled run
        # (SIGTERM) must stop waiting at once.
        deadline = time.monotonic() + (self.retry_budget if budget is None else budget)
        delay = 0.2
        while True:
            try:
                self.request_count += 1
                return call()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if time.monotonic() + delay > deadline or self.cancelled.is_set():
                    raise ClusterError(f"{operation}: API server unavailable: "
                                       f"{describe_api_error(exc)}") from None
                log.info("%s: transient error, retrying in %.1fs: %s", operation, delay,
                         describe_api_error(exc))
                self.cancelled.wait(delay)
                delay = min(delay * 2, 5.0)

    def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
              content_type: str | None, timeout: tuple[float, float | None]) -> urllib3.BaseHTTPResponse:
        """One HTTP request with the kubeconfig's auth and TLS; unread response, status checked."""
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            auth_settings=["BearerToken"])
        response = self.api.rest_client.request(method, url, headers=headers, body=body,
                                                _request_timeout=timeout).response
        if not 200 <= response.status <= 299:
            data = response.data
            response.release_conn()
            raise ApiError(response.status, response.reason or "", data)
        return response

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: Any = None, content_type: str = "application/json",
                operation: str | None = None, budget: float | None = None) -> Obj:
        """One API call returning the decoded JSON body; error statuses raise ApiError."""
        # The REST client serializes dict bodies to JSON (valid YAML too, for apply patches).
        def call() -> Obj:
            response = self._send(method, path, query, body, content_type if body is not None else None,
                                  (CONNECT_TIMEOUT, REQUEST_TIMEOUT))
            raw = response.data
            return json.loads(raw) if raw else {}

        return self._retrying(operation or f"{method} {path}", call, budget)

    def open_stream(self, path: str, query: dict[str, Any], read_timeout: float | None = None,
                    operation: str | None = None) -> urllib3.BaseHTTPResponse:
        """Open a streaming GET (watch, log); the caller reads and closes it."""
        return self._retrying(operation or f"stream {path}",
                              lambda: self._send("GET", path, query, None, None, (CONNECT_TIMEOUT, read_timeout)))

    # -- resources -------------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key in KNOWN_RESOURCES:
            return KNOWN_RESOURCES[key]
        if key not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self._checked(f"discover {kind} ({api_version}): the cluster does not serve this API",
                                    "GET", path)
            for entry in listing.get("resources", []):
                if "/" not in entry["name"]:
                    self._discovered[(api_version, entry["kind"])] = Resource(
                        api_version, entry["kind"], entry["name"], entry["namespaced"])
            if key not in self._discovered:
                raise ClusterError(f"discover {kind}: {api_version} has no kind {kind}")
        return self._discovered[key]

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the cluster has the API (e.g. the MPIJob CRD)."""
        listing = self._checked(f"discover {api_version}", "GET", f"/apis/{api_version}", if_missing=None)
        if listing is None:
            return False
        return any(entry.get("kind") == kind for entry in listing.get("resources", []))

    def _checked(self, operation: str, method: str, path: str, *, if_missing: Any = _RAISE,
                 **kwargs: Any) -> Any:
        """request() with API errors turned into a ClusterError naming the operation; a 404
        returns `if_missing` when one is given."""
        try:
            return self.request(method, path, operation=operation, **kwargs)
        except ApiError as exc:
            if exc.status == 404 and if_missing is not _RAISE:
                return if_missing
            raise ClusterError(f"{operation}: {describe_api_error(exc)}") from None

    def apply(self, obj: Obj, dry_run: bool = False) -> Obj:
        """Server-side apply of any object, custom resources included."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        query: dict[str, Any] = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        return self._checked(f"apply {obj['kind']} {where}", "PATCH",
                             resource.object_path(meta["name"], meta.get("namespace")), query=query,
                             body=obj, content_type="application/apply-patch+yaml")

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
        return self._checked(f"get {resource.kind} {name}", "GET", resource.object_path(name, namespace),
                             if_missing=None)

    def list(self, resource: Resource, namespace: str | None = None,
             label_selector: str | None = None, field_selector: str | None = None) -> Obj:
        """The list object (items + metadata.resourceVersion, for a watch to start from). Its items
        carry kind and apiVersion, which the API server leaves out of list items, so that an item
        saved on its own (objects.yaml) still says what it is."""
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        listing = self._checked(f"list {resource.plural} in {namespace or 'the cluster'}", "GET",
                                resource.collection_path(namespace), query=query)
        for item in listing.get("items", []):
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        return listing

    def delete(self, resource: Resource, name: str, namespace: str | None = None, grace_s: int = 5) -> bool:
        """Delete (dependents in the background); False when it was already gone. `grace_s=0` on a
        pod is `kubectl delete --force`: gone from the API without its kubelet's word."""
        deleted = self._checked(f"delete {resource.kind} {name}", "DELETE", resource.object_path(name, namespace),
                                body={"propagationPolicy": "Background", "gracePeriodSeconds": grace_s},
                                if_missing=False)
        return deleted is not False

    def watch(self, resource: Resource, namespace: str | None, resource_version: str,
              label_selector: str | None = None, field_selector: str | None = None,
              timeout_seconds: int = 300) -> WatchStream:
        """Open a watch from resource_version; iterate it for (type, object) events.

        The server ends it after timeout_seconds; iteration raises WatchExpired on 410 Gone so the
        caller re-lists. close() (from any thread) ends a blocked iteration at once.
        """
        query: dict[str, Any] = {"watch": "true", "resourceVersion": resource_version,
                                 "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        response = self.open_stream(resource.collection_path(namespace), query,
                                    read_timeout=timeout_seconds + 30,
                                    operation=f"watch {resource.plural}")
        return WatchStream(response, resource)

    def allowed(self, verb: str, group: str, resource: str, namespace: str | None = None) -> bool:
        """Whether this client's user may `verb` `resource` (a SelfSubjectAccessReview: RBAC's
        answer, as `kubectl auth can-i`; admission policies are not asked)."""
        attributes = {"verb": verb, "group": group, "resource": resource,
                      **({"namespace": namespace} if namespace else {})}
        review = self._checked(f"review access: {verb} {resource}", "POST",
                               "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                               body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                                     "spec": {"resourceAttributes": attributes}})
        return bool((review.get("status") or {}).get("allowed"))

    def ensure_namespace(self, name: str, labels: dict[str, str]) -> None:
        self.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels}})


class WatchExpired(Exception):
    """410 Gone: the watch's resourceVersion is too old; re-list and watch again."""


class WatchStream:
    """An open watch: iterate for (type, object) events; close() from any thread stops it."""

    def __init__(self, response: urllib3.BaseHTTPResponse, resource: Resource) -> None:
        self._response = response
        self._resource = resource
        self._closed = False

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        import urllib3

        try:
            for line in stream_lines(self._response):
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object", {})
                    if status.get("code") == 410:
                        raise WatchExpired(status.get("message", "watch expired"))
                    raise ClusterError(f"watch {self._resource.plural}: {status.get('message')}")
                yield event["type"], event["object"]
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            if not self._closed:
                raise
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            abort_stream(self._response)


def stream_lines(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The lines of a streamed response (a watch, a followed log) as they arrive, without holding
    more than one line; a last line without its newline is yielded too."""
    pending = b""
    for chunk in response.stream(STREAM_CHUNK_BYTES, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete
    if pending:
        yield pending


def abort_stream(response: urllib3.BaseHTTPResponse) -> None:
    """End a stream another thread may be blocked reading, and free its connection."""
    # shutdown() unblocks a read in progress in another thread; then free the connection.
    # RuntimeError, ValueError: the response was already released, or its socket is gone.
    with contextlib.suppress(AttributeError, OSError, RuntimeError, ValueError):
        response.shutdown()
    response.release_conn()
