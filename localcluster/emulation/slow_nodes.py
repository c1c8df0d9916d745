"""Slow nodes on demand: the node agent duty-cycles (SIGSTOP/SIGCONT) every process of the pods it
runs on a node labelled `kubetest2-training.local/slow=<fraction>`, so that node really is slower.

One thread for all slow nodes (DutyCycler): every period (100 ms) it stops every process of every
container session of their pods, then resumes each node's after its fraction of the period. A
stopped process never handles SIGTERM, so nothing may stay stopped: the node's processes are
resumed when the label goes, a container's before the agent signals it (DutyCycler.release, which
the executor calls before every signal it sends), and everything when the agent stops. Each
slowed pod says so: annotation `kubetest2-training.local/slowed-by: <fraction>` and a `Slowed`
event (`SlowedEnded` when the label goes), so artifacts tell injected slowness from a real one.

The same informer follows the nodes' own CPUs (`kubetest2-training.local/cpus`, node_cpus.py), and
the same record marks each limited pod (`cpus-limited-to`, `CpusLimited` / `CpusLimitEnded`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from localcluster.base.annotations import CPUS_ANNOTATION, SLOWED_ANNOTATION
from localcluster.control.api import ApiClient, ApiError
from localcluster.emulation.node_cpus import CgroupUnavailable, NodeCpus, parse_cores
from localcluster.emulation.nodes import CPUS_LABEL, SLOW_LABEL, node_cpus, slow_fraction
from localcluster.hostnodes.executor import PodRun
from localcluster.hostnodes.pod_status import agent_log
from localcluster.hostnodes.sessions import members_of_sessions, signal_process

PERIOD_S = 0.1


def resume_schedule(fractions: dict[str, float], period_s: float) -> list[tuple[float, str]]:
    """When to resume each slow node in a period that stopped them all at 0: (offset, node), in order."""
    return sorted((fraction * period_s, node) for node, fraction in fractions.items())


class DutyCycler:
    """Stops the processes of slow nodes' containers for their fraction of every period (see the
    module docstring). `sessions_on(node)` names the container sessions to slow on a node; the
    clock, the wait, the /proc scan and the signal are parameters so that tests can script them."""

    def __init__(self, sessions_on: Callable[[str], list[int]], period_s: float = PERIOD_S,
                 members: Callable[[Collection[int]], dict[int, int]] = members_of_sessions,
                 send: Callable[[int, signal.Signals], None] = signal_process,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None) -> None:
        self.sessions_on = sessions_on
        self.period_s = period_s
        self.members, self.send, self.clock = members, send, clock
        self.quit = threading.Event()
        self.wait = wait or self.quit.wait
        self.fractions: dict[str, float] = {}
        # pid -> (node, session) of every process this cycler holds stopped right now.
        self.stopped: dict[int, tuple[str, int]] = {}
        # Reentrant: the agent's SIGTERM handler (stop) may interrupt its main thread inside release.
        self.lock = threading.RLock()
        self.thread: threading.Thread | None = None

    def fraction(self, node: str) -> float | None:
        with self.lock:
            return self.fractions.get(node)

    def slow_nodes(self) -> list[str]:
        with self.lock:
            return list(self.fractions)

    def set_fraction(self, node: str, fraction: float | None) -> float | None:
        """Slows the node by `fraction` from the next period on; None resumes it now. The previous one."""
        with self.lock:
            previous = self.fractions.pop(node, None)
            if fraction is None:
                self._resume(lambda stopped_node, _session: stopped_node == node)
            else:
                self.fractions[node] = fraction
            return previous

    def release(self, sessions: Collection[int]) -> None:
        """Resumes these container sessions now: the agent is about to signal them. The caller has
        made sure `sessions_on` no longer names them (the pod is stopping), or kills them anyway."""
        with self.lock:
            self._resume(lambda _node, session: session in sessions)

    def _resume(self, which: Callable[[str, int], bool]) -> None:
        """SIGCONT to the stopped processes `which(node, session)` selects (the lock is held)."""
        for pid, (node, session) in list(self.stopped.items()):
            if which(node, session):
                self.send(pid, signal.SIGCONT)
                self.stopped.pop(pid, None)  # (a reentrant call may have resumed it already)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True, name="slow-nodes")
        self.thread.start()

    def stop(self) -> None:
        """Ends the thread and resumes whatever it held stopped."""
        self.quit.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        with self.lock:
            self._resume(lambda _node, _session: True)

    def run(self) -> None:
        while not self.quit.is_set():
            self.cycle()

    def cycle(self) -> None:
        """One period: stop every slow node's processes, resume each node at its offset, wait out
        the rest. Once `quit` is set the waits return at once, so every node is still resumed.

        The period starts once the processes are stopped, not before the /proc scan that finds
        them: on a loaded host the scan took most of the 100 ms, and a stop window counted from
        before it left the processes stopped in 2 of 100 samples instead of 75 (a slow node that
        was not slow). The scan's time now adds to the running part of the period."""
        schedule = self._stop_slow_nodes()
        start = self.clock()
        for offset, node in schedule:
            self.wait(max(0.0, start + offset - self.clock()))
            with self.lock:
                self._resume(lambda stopped_node, _session, node=node: stopped_node == node)
        self.wait(max(0.0, start + self.period_s - self.clock()))

    def _stop_slow_nodes(self) -> list[tuple[float, str]]:
        """SIGSTOP to every process of the slow nodes' container sessions; the resume schedule."""
        with self.lock:
            if self.quit.is_set() or not self.fractions:
                return []
            node_of_session = {session: node for node in self.fractions for session in self.sessions_on(node)}
            for pid, session in self.members(node_of_session.keys()).items():
                self.send(pid, signal.SIGSTOP)
                self.stopped[pid] = (node_of_session[session], session)
            return resume_schedule(self.fractions, self.period_s)


@dataclass(frozen=True)
class PodMark:
    """How a pod records what its node does to it: an annotation with the value (kept once the
    label goes: the run was affected) and an event when it starts and when it ends."""

    annotation: str
    started: str
    ended: str
    describe: Callable[[str, float], str]  # (node, value) -> the started event's message
    label: str

    def ended_message(self, node: str) -> str:
        return f"Node {node} is no longer labelled {self.label}: the pod's processes run as before"


SLOWED = PodMark(SLOWED_ANNOTATION, "Slowed", "SlowedEnded", lambda node, fraction: (
    f"Injected slowness: node {node} is labelled {SLOW_LABEL}={fraction}; the node agent stops every process of "
    f"this pod {fraction:.0%} of every {PERIOD_S * 1000:.0f} ms (SIGSTOP/SIGCONT)"), SLOW_LABEL)
CPUS_LIMITED = PodMark(CPUS_ANNOTATION, "CpusLimited", "CpusLimitEnded", lambda node, cores: (
    f"Node {node} is labelled {CPUS_LABEL}={cores:g}: the node agent runs this pod's processes in the node's cgroup, "
    f"limited to {cores:g} of the machine's cores (CFS quota), as a node with its own CPUs"), CPUS_LABEL)


class SlowNodes:
    """The node agent's side: follows the nodes' slow label into the cycler and their cpus label
    into `cpus` (when given), and records both on every pod they affect. `runs_on(node)` lists the
    node's pods run for real."""

    def __init__(self, api: ApiClient, runs_on: Callable[[str], list[PodRun]],
                 cpus: Callable[[Callable[[str], list[int]], Callable[[str, float | None], None]], NodeCpus]
                 | None = None) -> None:
        self.api = api
        self.runs_on = runs_on
        self.cycler = DutyCycler(self.sessions_on)
        self.cpus = cpus(self.sessions_on, self.cpus_changed) if cpus is not None else None
        # (pod uid, mark annotation) -> the value last recorded on it (an event per change, not per node update).
        self.recorded: dict[tuple[str, str], float | None] = {}
        self.recorded_lock = threading.Lock()

    def sessions_on(self, node: str) -> list[int]:
        """Container sessions to slow: those of pods not stopping (a stopping pod's are released)."""
        return [session for run in self.runs_on(node) if not run.stopping.is_set() for session in run.sessions()]

    # ---- the nodes' labels (an informer's callbacks) ------------------------------------------------

    def on_list(self, nodes: list[dict[str, Any]]) -> None:
        listed = {node["metadata"]["name"] for node in nodes}
        limited = set(self.cpus.limits) if self.cpus is not None else set()
        for gone in (set(self.cycler.slow_nodes()) | limited) - listed:
            self.on_event("DELETED", {"metadata": {"name": gone}})
        for node in nodes:
            self.on_event("ADDED", node)

    def on_event(self, event_type: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        try:
            fraction = None if event_type == "DELETED" else slow_fraction(node)
        except ValueError as error:
            agent_log(f"node {name}: ignoring its label: {error}")
            fraction = None
        self.node_changed(name, fraction)
        if self.cpus is not None:
            self.cpus_label(name, None if event_type == "DELETED" else node_cpus(node))

    def cpus_label(self, node: str, value: str | None) -> None:
        """Gives the node the cores its label names; a malformed label, or a machine that cannot
        (no root, no cgroup cpu controller), is logged and leaves the node as it is."""
        assert self.cpus is not None
        try:
            self.cpus.set_limit(node, None if value is None else parse_cores(value))
        except ValueError as error:
            agent_log(f"node {node}: ignoring its label: {error}")
        except (CgroupUnavailable, OSError) as error:
            agent_log(f"node {node}: cannot limit its CPUs: {error}")

    def node_changed(self, node: str, fraction: float | None) -> None:
        if self.cycler.set_fraction(node, fraction) == fraction:
            return
        agent_log(f"node {node}: " + (f"slowed: its pods' processes stopped {fraction:.0%} of every "
                                      f"{PERIOD_S * 1000:.0f} ms" if fraction else "full speed"))
        for run in self.runs_on(node):
            self.record(run, SLOWED, fraction)

    def cpus_changed(self, node: str, cores: float | None) -> None:
        agent_log(f"node {node}: " + (f"its pods' processes limited to {cores:g} cores" if cores else "CPUs unlimited"))
        for run in self.runs_on(node):
            self.record(run, CPUS_LIMITED, cores)

    # ---- the pods' record ---------------------------------------------------------------------------

    def pod_started(self, run: PodRun) -> None:
        """A pod starting on a node already slow or limited is affected too: say so on it."""
        fraction = self.cycler.fraction(run.node)
        if fraction is not None:
            self.record(run, SLOWED, fraction)
        cores = self.cpus.limit(run.node) if self.cpus is not None else None
        if cores is not None:
            self.record(run, CPUS_LIMITED, cores)

    def record(self, run: PodRun, mark: PodMark, value: float | None) -> None:
        """The mark's annotation (the last value applied) and an event per change."""
        key = (run.uid, mark.annotation)
        with self.recorded_lock:
            if run.finished.is_set() or self.recorded.get(key) == value:
                return
            self.recorded[key] = value
        if value is None:
            run.reporter.event("Normal", mark.ended, None, mark.ended_message(run.node))
            return
        try:
            self.api.merge_patch("Pod", run.name, {"metadata": {"annotations": {mark.annotation: str(value)}}},
                                 run.namespace)
        except (ApiError, OSError) as error:
            agent_log(f"pod {run.namespace}/{run.name}: annotating it ({mark.annotation}): {error}")
        run.reporter.event("Normal", mark.started, None, mark.describe(run.node, value))

    def forget(self, uid: str) -> None:
        with self.recorded_lock:
            for key in [key for key in self.recorded if key[0] == uid]:
                del self.recorded[key]
