"""Slow nodes on demand: the node agent duty-cycles (SIGSTOP/SIGCONT) every process of the pods it
runs on a node labelled `kubetest2-training.local/slow=<fraction>`, so that node really is slower.

One thread for all slow nodes (DutyCycler): every period (100 ms) it stops every process of every
container session of their pods, then resumes each node's after its fraction of the period. A
stopped process never handles SIGTERM, so nothing may stay stopped: the node's processes are
resumed when the label goes, a container's before the agent signals it (DutyCycler.release, which
the executor calls before every signal it sends), and everything when the agent stops. Each
slowed pod says so: annotation `kubetest2-training.local/slowed-by: <fraction>` and a `Slowed`
event (`SlowedEnded` when the label goes), so artifacts tell injected slowness from a real one.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from .annotations import SLOWED_ANNOTATION
from .api import ApiClient, ApiError
from .executor import PodRun
from .nodes import SLOW_LABEL, slow_fraction
from .pod_status import agent_log
from .sessions import members_of_sessions, signal_process

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
        the rest. Once `quit` is set the waits return at once, so every node is still resumed."""
        start = self.clock()
        for offset, node in self._stop_slow_nodes():
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


class SlowNodes:
    """The node agent's side: follows the nodes' slow label into the cycler and records the
    slowness on every pod it affects. `runs_on(node)` lists the node's pods run for real."""

    def __init__(self, api: ApiClient, runs_on: Callable[[str], list[PodRun]]) -> None:
        self.api = api
        self.runs_on = runs_on
        self.cycler = DutyCycler(self.sessions_on)
        # pod uid -> the fraction last recorded on it (an event per change, not per node update).
        self.recorded: dict[str, float | None] = {}
        self.recorded_lock = threading.Lock()

    def sessions_on(self, node: str) -> list[int]:
        """Container sessions to slow: those of pods not stopping (a stopping pod's are released)."""
        return [session for run in self.runs_on(node) if not run.stopping.is_set() for session in run.sessions()]

    # ---- the nodes' label (an informer's callbacks) ---------------------------------------------------

    def on_list(self, nodes: list[dict[str, Any]]) -> None:
        listed = {node["metadata"]["name"] for node in nodes}
        for gone in set(self.cycler.slow_nodes()) - listed:
            self.node_changed(gone, None)
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

    def node_changed(self, node: str, fraction: float | None) -> None:
        if self.cycler.set_fraction(node, fraction) == fraction:
            return
        agent_log(f"node {node}: " + (f"slowed: its pods' processes stopped {fraction:.0%} of every "
                                      f"{PERIOD_S * 1000:.0f} ms" if fraction else "full speed"))
        for run in self.runs_on(node):
            self.record(run, fraction)

    # ---- the pods' record ---------------------------------------------------------------------------

    def pod_started(self, run: PodRun) -> None:
        """A pod starting on a node already slow is slowed too: say so on it."""
        fraction = self.cycler.fraction(run.node)
        if fraction is not None:
            self.record(run, fraction)

    def record(self, run: PodRun, fraction: float | None) -> None:
        """Annotation (the last fraction applied: kept when the label goes, the run was slowed) and
        an event per change."""
        with self.recorded_lock:
            if run.finished.is_set() or self.recorded.get(run.uid) == fraction:
                return
            self.recorded[run.uid] = fraction
        if fraction is None:
            run.reporter.event("Normal", "SlowedEnded", None, f"Node {run.node} is no longer labelled {SLOW_LABEL}: "
                               "the pod's processes run at full speed again")
            return
        try:
            self.api.merge_patch("Pod", run.name, {"metadata": {"annotations": {SLOWED_ANNOTATION: str(fraction)}}},
                                 run.namespace)
        except (ApiError, OSError) as error:
            agent_log(f"pod {run.namespace}/{run.name}: annotating its slowness: {error}")
        run.reporter.event("Normal", "Slowed", None,
                           f"Injected slowness: node {run.node} is labelled {SLOW_LABEL}={fraction}; the node agent "
                           f"stops every process of this pod {fraction:.0%} of every {PERIOD_S * 1000:.0f} ms "
                           "(SIGSTOP/SIGCONT)")

    def forget(self, uid: str) -> None:
        with self.recorded_lock:
            self.recorded.pop(uid, None)
