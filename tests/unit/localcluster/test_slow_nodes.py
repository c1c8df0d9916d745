"""Slow nodes (localcluster/emulation/slow_nodes.py): which processes the duty cycle stops and resumes
when, on a scripted clock; one real process stopped and resumed by the real thread; and how the
node label reaches the cycler and the pods' annotation and events."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from polling import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.emulation.nodes import parse_slow_fraction
from localcluster.emulation.slow_nodes import DutyCycler, SlowNodes, resume_schedule

PERIOD_S = 0.1


class ScriptedNodes:
    """Stands in for the agent and the kernel: sessions per node, processes per session, a clock
    that the cycler's waits advance, and a log of (time, pid, signal) for every signal sent."""

    def __init__(self, sessions: dict[str, list[int]], processes: dict[int, list[int]]) -> None:
        self.sessions = sessions
        self.processes = processes
        self.now = 0.0
        self.sent: list[tuple[float, int, str]] = []
        self.on_wait: list = []  # callables run (once each) at the next waits

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        if self.on_wait:
            self.on_wait.pop(0)()
        self.now += seconds
        return False

    def send(self, pid: int, sig: signal.Signals) -> None:
        self.sent.append((round(self.now, 6), pid, sig.name))

    def members(self, sessions: Collection[int]) -> dict[int, int]:
        return {pid: session for session, pids in self.processes.items() if session in sessions for pid in pids}

    def cycler(self) -> DutyCycler:
        return DutyCycler(lambda node: self.sessions.get(node, []), PERIOD_S, self.members, self.send,
                          self.clock, self.wait)


@pytest.fixture
def nodes() -> ScriptedNodes:
    # Node a: one container (session 10) whose rank left the group (11); node b: session 20;
    # node c: never slow.
    return ScriptedNodes({"a": [10], "b": [20], "c": [30]}, {10: [10, 11], 20: [20], 30: [30]})


def test_resume_schedule_orders_nodes_by_fraction():
    assert resume_schedule({"a": 0.5, "b": 0.25}, 0.1) == [(0.025, "b"), (0.05, "a")]
    assert resume_schedule({}, 0.1) == []


def test_one_period_stops_every_process_of_slow_nodes_and_resumes_each_at_its_fraction(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    cycler.set_fraction("a", 0.5)
    cycler.set_fraction("b", 0.25)
    cycler.cycle()
    assert nodes.sent == [(0.0, 10, "SIGSTOP"), (0.0, 11, "SIGSTOP"), (0.0, 20, "SIGSTOP"),
                          (0.025, 20, "SIGCONT"), (0.05, 10, "SIGCONT"), (0.05, 11, "SIGCONT")]
    assert nodes.now == pytest.approx(PERIOD_S)  # waits out the period
    assert cycler.stopped == {}


def stopped_intervals(nodes: ScriptedNodes, fraction: float, periods: int) -> list[float]:
    """Node a slowed by `fraction` for `periods` periods: how long each stop of its process 10 lasted."""
    cycler = nodes.cycler()
    cycler.set_fraction("a", fraction)
    for _ in range(periods):
        cycler.cycle()
    stops = [t for t, pid, sig in nodes.sent if pid == 10 and sig == "SIGSTOP"]
    resumes = [t for t, pid, sig in nodes.sent if pid == 10 and sig == "SIGCONT"]
    assert len(stops) == len(resumes) == periods
    return [round(resume - stop, 6) for stop, resume in zip(stops, resumes, strict=True)]


def test_stopped_share_of_the_time_is_the_fraction(nodes: ScriptedNodes):
    assert sum(stopped_intervals(nodes, 0.75, 10)) / nodes.now == pytest.approx(0.75)


def test_each_stop_lasts_its_fraction_however_long_finding_the_processes_takes(nodes: ScriptedNodes):
    """A loaded host's /proc scan (here 80 ms of a 100 ms period) must not eat the stopped time."""
    members = nodes.members

    def slow_scan(sessions: Collection[int]) -> dict[int, int]:
        nodes.now += 0.08
        return members(sessions)

    nodes.members = slow_scan  # type: ignore[method-assign]
    assert stopped_intervals(nodes, 0.75, 5) == [0.075] * 5


def test_no_slow_node_no_signal_and_the_period_still_waited(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    cycler.cycle()
    assert nodes.sent == [] and nodes.now == pytest.approx(PERIOD_S)


def test_sessions_started_later_are_slowed_from_the_next_period(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    cycler.set_fraction("a", 0.5)
    cycler.cycle()
    nodes.sessions["a"].append(40)
    nodes.processes[40] = [40]
    nodes.sent.clear()
    cycler.cycle()
    assert (0.1, 40, "SIGSTOP") in nodes.sent and (0.15, 40, "SIGCONT") in nodes.sent


def test_release_resumes_at_once_and_the_scheduled_resume_does_not_repeat_it(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    cycler.set_fraction("a", 0.5)

    def pod_stopping() -> None:  # as the agent does: the pod leaves sessions_on, then release
        nodes.sessions["a"] = []
        nodes.now += 0.01
        cycler.release([10])

    nodes.on_wait.append(pod_stopping)
    cycler.cycle()
    assert nodes.sent == [(0.0, 10, "SIGSTOP"), (0.0, 11, "SIGSTOP"), (0.01, 10, "SIGCONT"), (0.01, 11, "SIGCONT")]
    nodes.sent.clear()
    cycler.cycle()
    assert nodes.sent == []


def test_removing_the_label_mid_period_resumes_the_node_now(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    cycler.set_fraction("a", 0.9)
    cycler.set_fraction("b", 0.9)
    nodes.on_wait.append(lambda: cycler.set_fraction("a", None))
    cycler.cycle()
    # a resumed when its label went (t=0), b at 0.09; next period only b is stopped.
    assert [(t, pid, sig) for t, pid, sig in nodes.sent if sig == "SIGCONT"] == [
        (0.0, 10, "SIGCONT"), (0.0, 11, "SIGCONT"), (0.09, 20, "SIGCONT")]
    nodes.sent.clear()
    cycler.cycle()
    assert {pid for _, pid, _ in nodes.sent} == {20}


def test_set_fraction_returns_the_previous_one(nodes: ScriptedNodes):
    cycler = nodes.cycler()
    assert cycler.set_fraction("a", 0.5) is None
    assert cycler.set_fraction("a", 0.25) == 0.5
    assert cycler.set_fraction("a", None) == 0.25
    assert cycler.slow_nodes() == []


@pytest.mark.parametrize("text", ["0", "1", "1.5", "-0.2", "nan", "half", ""])
def test_slow_fraction_outside_0_1_is_refused_naming_what_is_expected(text: str):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        parse_slow_fraction(text)


def test_slow_fraction_parsed():
    assert parse_slow_fraction("0.25") == 0.25


# ---- one real process, the real thread ------------------------------------------------------------------


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_real_process_is_stopped_most_of_the_time_and_stop_leaves_it_running(sleeper: subprocess.Popen[bytes]):
    cycler = DutyCycler(lambda node: [sleeper.pid] if node == "slow" else [])
    cycler.set_fraction("slow", 0.9)
    cycler.start()
    try:
        # Sampled once the cycler's thread runs: on a loaded host its start alone can take a good
        # part of the 0.4 s sampled, which then counts as "not stopped".
        wait_for(lambda: process_state(sleeper.pid) == "T", 30, "the cycler to stop the process once")
        states = []
        for _ in range(40):  # 0.4 s: four periods, sampled every 10 ms
            states.append(process_state(sleeper.pid))
            time.sleep(0.01)
    finally:
        cycler.stop()
    assert states.count("T") >= len(states) // 2, states
    assert not cycler.thread.is_alive()
    assert process_state(sleeper.pid) in ("S", "R")  # sleeping (or just resumed), not stopped (T)


# ---- the agent's side: the node label in, the pods' record out ------------------------------------------


class RecordingApi:
    """Stands in for the API client: keeps the merge patches."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str, dict, str]] = []

    def merge_patch(self, kind: str, name: str, patch: dict, namespace: str = "") -> None:
        self.patches.append((kind, name, patch, namespace))


def fake_run(name: str, node: str) -> SimpleNamespace:
    events: list[tuple[str, str]] = []
    return SimpleNamespace(uid=f"uid-{name}", name=name, namespace="ns", node=node, events=events,
                           finished=threading.Event(), stopping=threading.Event(), sessions=lambda: [1000],
                           reporter=SimpleNamespace(event=lambda _kind, reason, _c, message: events.append(
                               (reason, message))))


def node_object(name: str, slow: str | None) -> dict:
    return {"metadata": {"name": name, "labels": {} if slow is None else {"kubetest2-training.local/slow": slow}}}


def test_the_label_slows_the_node_and_each_of_its_pods_says_so_once():
    api, runs = RecordingApi(), [fake_run("p", "n1")]
    slow = SlowNodes(api, lambda node: [r for r in runs if r.node == node])
    slow.on_list([node_object("n1", "0.5"), node_object("n2", None)])
    slow.on_event("MODIFIED", node_object("n1", "0.5"))  # unchanged: nothing new recorded
    assert slow.cycler.fraction("n1") == 0.5 and slow.cycler.fraction("n2") is None
    assert api.patches == [("Pod", "p", {"metadata": {"annotations": {"kubetest2-training.local/slowed-by": "0.5"}}},
                            "ns")]
    assert [reason for reason, _ in runs[0].events] == ["Slowed"]
    assert "n1" in runs[0].events[0][1] and "50%" in runs[0].events[0][1]
    assert slow.sessions_on("n1") == [1000]
    runs[0].stopping.set()  # a pod being deleted is no longer cycled
    assert slow.sessions_on("n1") == []

    slow.on_event("MODIFIED", node_object("n1", None))
    assert slow.cycler.fraction("n1") is None
    assert [reason for reason, _ in runs[0].events] == ["Slowed", "SlowedEnded"]


def test_a_pod_starting_on_a_slow_node_is_recorded_and_a_malformed_label_ignored():
    api, runs = RecordingApi(), []
    slow = SlowNodes(api, lambda node: [r for r in runs if r.node == node])
    slow.on_event("ADDED", node_object("n1", "0.25"))
    slow.on_event("ADDED", node_object("n2", "2"))
    assert slow.cycler.slow_nodes() == ["n1"]
    late, elsewhere = fake_run("late", "n1"), fake_run("elsewhere", "n2")
    runs += [late, elsewhere]
    slow.pod_started(late)
    slow.pod_started(elsewhere)
    assert [reason for reason, _ in late.events] == ["Slowed"] and elsewhere.events == []
    slow.on_event("DELETED", node_object("n1", "0.25"))
    assert slow.cycler.slow_nodes() == []


class FakeCpus:
    """Stands in for NodeCpus: records the limits, and reports each change back as it does."""

    def __init__(self, sessions_on, on_change) -> None:
        self.limits: dict[str, float] = {}
        self.on_change = on_change

    def limit(self, node: str) -> float | None:
        return self.limits.get(node)

    def set_limit(self, node: str, cores: float | None) -> None:
        if self.limits.get(node) == cores:
            return
        if cores is None:
            self.limits.pop(node, None)
        else:
            self.limits[node] = cores
        self.on_change(node, cores)


def test_the_cpus_label_limits_the_node_and_its_pods_say_so_and_a_malformed_one_is_ignored():
    api, runs = RecordingApi(), [fake_run("p", "n1")]
    slow = SlowNodes(api, lambda node: [r for r in runs if r.node == node], FakeCpus)
    labelled = {"metadata": {"name": "n1", "labels": {"kubetest2-training.local/cpus": "0.4"}}}
    slow.on_list([labelled, node_object("n2", None)])
    assert slow.cpus.limits == {"n1": 0.4}
    assert api.patches == [("Pod", "p", {"metadata": {"annotations": {
        "kubetest2-training.local/cpus-limited-to": "0.4"}}}, "ns")]
    assert [reason for reason, _ in runs[0].events] == ["CpusLimited"] and "0.4" in runs[0].events[0][1]
    late = fake_run("late", "n1")
    runs.append(late)
    slow.pod_started(late)
    assert [reason for reason, _ in late.events] == ["CpusLimited"]
    slow.on_event("MODIFIED", {"metadata": {"name": "n2", "labels": {"kubetest2-training.local/cpus": "lots"}}})
    assert slow.cpus.limits == {"n1": 0.4}
    slow.on_list([node_object("n2", None)])  # n1 gone: its limit goes with it
    assert slow.cpus.limits == {}
    assert [reason for reason, _ in runs[0].events] == ["CpusLimited", "CpusLimitEnded"]
