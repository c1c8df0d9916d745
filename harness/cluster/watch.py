"""The watch machinery under wait_for: streams that list and watch resources (or follow a pod's
log) in threads feeding one queue, and the ClusterState those events build.

Each Watched resource is listed once, then watched (re-listed on 410 Gone, resumed after a dropped
connection); a FollowedLog forwards the lines of a pod's log that match its pattern. Readers of
the state learn what changed since they last looked (ChangeCursor), so judging a pod event costs
O(1), not O(pods).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.cluster.client import (
    Cluster,
    WatchExpired,
    WatchStream,
    abort_stream,
    describe_api_error,
    is_transient,
    stream_lines,
)
from harness.cluster.pods import conditions_text, container_running, describe_pod
from harness.cluster.resources import POD, Obj, Resource
from harness.errors import ClusterError

if TYPE_CHECKING:
    import urllib3

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); "" for cluster-scoped objects


@dataclass(frozen=True)
class Watched:
    """A set of objects to keep in view: one resource in one namespace, optionally selected."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


@dataclass(frozen=True)
class FollowedLog:
    """The lines matching `pattern` in a running pod's log, as they are written."""

    namespace: str
    pod: str
    pattern: re.Pattern[str]
    container: str | None = None


Source = Watched | FollowedLog
# What a stream thread puts on the queue: (event type, the source, the payload: a listing's items,
# an object, a log line, or an error's text, by event type).
Event = tuple[str, Source, Any]
SYNC, ERROR, LOG_LINE, LOG_END = "SYNC", "ERROR", "LOG_LINE", "LOG_END"


@dataclass
class ClusterState:
    """The latest version of every watched object, the matching lines of followed logs, and when
    each time-based condition was first seen."""

    # kind -> (namespace, name) -> object. Per kind, with the sorted names kept until one is
    # added or removed: re-sorting every watched object per event made a 256-pod job's wait cost
    # O(pods^2) (bench/harness_costs.py cpu).
    _by_kind: dict[str, dict[Key, Obj]] = field(default_factory=dict)
    _order: dict[str, list[Key]] = field(default_factory=dict)
    # kind -> the keys of the objects changed, in order (read through a ChangeCursor).
    _changed: dict[str, list[Key]] = field(default_factory=dict)
    _listed: set[str] = field(default_factory=set)
    _log_lines: dict[FollowedLog, list[str]] = field(default_factory=dict)
    _logs_ended: set[FollowedLog] = field(default_factory=set)
    _first_seen: dict[str, float] = field(default_factory=dict)
    # How often held_for was consulted: a verdict reached without it depends only on the objects.
    time_checks: int = 0

    def apply(self, event: Event) -> None:
        """One event from a stream thread; an ERROR event raises its ClusterError."""
        event_type, source, payload = event
        if event_type == ERROR:
            raise ClusterError(str(payload))
        if isinstance(source, FollowedLog):
            if event_type == LOG_END:
                self._logs_ended.add(source)
            else:
                self._log_lines.setdefault(source, []).append(str(payload))
        elif event_type == SYNC:
            self.replace_all(source.resource.kind, payload)
        else:
            self.update(source.resource.kind, event_type, payload)

    def update(self, kind: str, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        objects = self._by_kind.setdefault(kind, {})
        self._changed.setdefault(kind, []).append(key)
        if event_type == "DELETED":
            if objects.pop(key, None) is not None:
                self._order.pop(kind, None)
        else:
            if key not in objects:
                self._order.pop(kind, None)
            objects[key] = obj

    def replace_all(self, kind: str, items: list[Obj]) -> None:
        """A fresh listing of a kind: what it lacks is gone."""
        self._changed.setdefault(kind, []).extend(self._by_kind.get(kind, {}))
        self._by_kind[kind] = {}
        self._order.pop(kind, None)
        self._listed.add(kind)
        for item in items:
            self.update(kind, "ADDED", item)

    def listed(self, kind: str) -> bool:
        """Whether a kind has been listed yet (before that, an absent object proves nothing)."""
        return kind in self._listed

    def of_kind(self, kind: str) -> list[Obj]:
        """The objects of a kind, by namespace and name."""
        objects = self._by_kind.get(kind)
        if not objects:
            return []
        order = self._order.get(kind)
        if order is None:
            order = self._order[kind] = sorted(objects)
        return [objects[key] for key in order]

    def count(self, kind: str) -> int:
        return len(self._by_kind.get(kind) or {})

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._by_kind.get(kind, {}).get((namespace, name))

    def changes(self, kind: str) -> list[Key]:
        """Every change to objects of a kind so far, in order (a ChangeCursor reads the new ones)."""
        return self._changed.get(kind, [])

    def log_lines(self, followed: FollowedLog) -> list[str]:
        """The lines of a followed log that matched its pattern so far."""
        return self._log_lines.get(followed, [])

    def log_ended(self, followed: FollowedLog) -> bool:
        return followed in self._logs_ended

    def held_for(self, marker: str, now: float) -> float:
        """Seconds since `marker` (e.g. "pod uid unschedulable") was first observed."""
        self.time_checks += 1
        return now - self._first_seen.setdefault(marker, now)

    def summary(self) -> str:
        """One line per pod and job: what the last state seen was, for timeout messages."""
        lines = [f"job {obj['metadata']['name']}: {conditions_text(obj)}"
                 for obj in self.of_kind("Job") + self.of_kind("MPIJob")]
        lines += [f"pod {pod['metadata']['name']}: {describe_pod(pod)}" for pod in self.of_kind("Pod")]
        return "\n".join(lines) or "no objects seen"


class ChangeCursor:
    """A reader's place in one kind's changes: what changed since it last read.

    A new ClusterState (a new wait) starts the reader over: `changed` then says `fresh`.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._state: ClusterState | None = None
        self._read = 0

    def changed(self, state: ClusterState) -> tuple[list[Key], bool]:
        """The keys changed (or removed) since the last call, and whether `state` is new to it."""
        fresh = state is not self._state
        if fresh:
            self._state, self._read = state, 0
        keys = state.changes(self.kind)[self._read:]
        self._read += len(keys)
        return keys, fresh


class _Stream(threading.Thread):
    """A thread reading one source into the shared queue until `stop` is set or `close()` is called."""

    def __init__(self, cluster: Cluster, events: queue.Queue[Event], stop: threading.Event, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.cluster, self.events, self.stop = cluster, events, stop

    def close(self) -> None:
        """End a read blocked in this thread (called from the waiting thread)."""
        raise NotImplementedError


class _ResourceStream(_Stream):
    """List + watch one Watched, feeding (SYNC | event type | ERROR, source, payload) to a queue."""

    def __init__(self, cluster: Cluster, watched: Watched, events: queue.Queue[Event],
                 stop: threading.Event) -> None:
        super().__init__(cluster, events, stop, f"watch-{watched.resource.plural}")
        self.watched = watched
        self.stream: WatchStream | None = None

    def run(self) -> None:
        backoff = 0.2
        while not self.stop.is_set():
            try:
                self._list_then_watch()
                backoff = 0.2
            except WatchExpired:
                continue  # re-list from now
            except Exception as exc:
                if self.stop.is_set():
                    return
                if not is_transient(exc):
                    self.events.put((ERROR, self.watched, exc))
                    return
                # A dropped connection (API server restart): re-list once it answers again.
                log.info("watch %s dropped (%s); resuming", self.watched.resource.plural, exc)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _list_then_watch(self) -> None:
        w = self.watched
        listing = self.cluster.list(w.resource, w.namespace, w.label_selector, w.field_selector)
        self.events.put((SYNC, w, listing.get("items", [])))
        version = listing["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            self.stream = self.cluster.watch(w.resource, w.namespace, version, w.label_selector, w.field_selector)
            for event_type, obj in self.stream:
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if event_type != "BOOKMARK":
                    self.events.put((event_type, w, obj))

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()


class _LogStream(_Stream):
    """Follow one pod's log, feeding each line matching the pattern, then LOG_END, to a queue.

    LOG_END means the container's log is over: a follow that ends while the container still runs
    (a kubelet cuts it when a CRI status call fails under load, a kubelet restart, a dropped
    connection) is opened again, the lines already read skipped, so a silent container that has not
    printed its line yet is never read as one that ended without it."""

    # How often a cut follow is opened again, and the pause between: enough for a kubelet's hiccup.
    REOPENS = 20
    REOPEN_PAUSE_S = 1.0

    def __init__(self, cluster: Cluster, followed: FollowedLog, events: queue.Queue[Event],
                 stop: threading.Event) -> None:
        super().__init__(cluster, events, stop, f"follow-{followed.pod}")
        self.followed = followed
        self.response: urllib3.BaseHTTPResponse | None = None

    def run(self) -> None:
        f = self.followed
        query = {"follow": "true", **({"container": f.container} if f.container else {})}
        read = 0  # lines of the log read so far: a reopened follow starts at the log's beginning
        for attempt in range(self.REOPENS + 1):
            try:
                # No read timeout: the wait's deadline bounds it, and close() ends a blocked read.
                self.response = self.cluster.open_stream(POD.object_path(f.pod, f.namespace) + "/log", query,
                                                         operation=f"follow log of pod {f.pod}")
            except Exception as exc:
                if attempt == 0:
                    self.events.put((ERROR, f, f"follow log of pod {f.pod}: {describe_api_error(exc)}"))
                    return
                break  # it answered before: the pod is likely gone; the condition decides
            skip, read = read, 0
            try:
                for raw in stream_lines(self.response):
                    read += 1
                    if read <= skip:
                        continue
                    line = raw.decode("utf-8", errors="replace")
                    if f.pattern.search(line):
                        self.events.put((LOG_LINE, f, line))
            except Exception:  # closed under us, or the pod went away: the condition decides
                log.debug("follow log of %s ended", f.pod, exc_info=True)
            read = max(read, skip)
            if self.stop.is_set() or not self._container_running():
                break
            log.info("follow log of %s ended while its container runs; following it again", f.pod)
            self.stop.wait(self.REOPEN_PAUSE_S)
        self.events.put((LOG_END, f, None))

    def _container_running(self) -> bool:
        """Whether the followed container (the one named, else the pod's one container) runs now."""
        f = self.followed
        try:
            pod = self.cluster.get(POD, f.pod, f.namespace)
        except Exception:
            return False
        return pod is not None and container_running(pod, f.container)

    def close(self) -> None:
        if self.response is not None:
            abort_stream(self.response)


class Watcher:
    """The streams of a set of sources, open while in a `with` block, and the state they build."""

    def __init__(self, cluster: Cluster, sources: list[Source]) -> None:
        self.state = ClusterState()
        self._events: queue.Queue[Event] = queue.Queue()
        self._stop = threading.Event()
        self._threads = [
            _LogStream(cluster, s, self._events, self._stop) if isinstance(s, FollowedLog)
            else _ResourceStream(cluster, s, self._events, self._stop)
            for s in dict.fromkeys(sources)
        ]

    def __enter__(self) -> Watcher:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.close()

    def receive(self, timeout: float) -> bool:
        """Apply the next event, and every other one already queued (a burst is judged once);
        False when none came within `timeout`. A stream's error raises its ClusterError."""
        try:
            self.state.apply(self._events.get(timeout=timeout))
        except queue.Empty:
            return False
        while not self._events.empty():
            self.state.apply(self._events.get_nowait())
        return True
