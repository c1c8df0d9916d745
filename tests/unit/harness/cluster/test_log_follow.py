"""A followed log (harness/cluster/watch.py _LogStream) ends only when its container's log is over: a
follow the kubelet cuts while the container runs is opened again, without feeding a line twice.
Seen on the real nodes under load (TestElasticRecovery, cold CI run: "the log of nanogpt-elastic-0
ended without a line matching 'saved checkpoint'" 15 s into a run whose pods had printed nothing yet)."""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterator

from harness.cluster.watch import LOG_END, LOG_LINE, FollowedLog, _LogStream


class Response:
    """What open_stream returns, as stream_lines reads it: chunks, then the end of the stream."""

    def __init__(self, text: str) -> None:
        self.text = text

    def stream(self, _amount: int, decode_content: bool = True) -> Iterator[bytes]:
        yield self.text.encode()

    def shutdown(self) -> None: ...

    def release_conn(self) -> None: ...


class Cluster:
    """Answers each follow with the next log text; the container runs while `running` says so."""

    def __init__(self, follows: list[str], running: list[bool]) -> None:
        self.follows, self.running = follows, running
        self.opened = 0

    def open_stream(self, path: str, query: dict, operation: str = "") -> Response:
        assert path.endswith("/pods/worker-0/log") and query["follow"] == "true"
        self.opened += 1
        return Response(self.follows.pop(0))

    def get(self, resource, name: str, namespace: str | None = None) -> dict:
        state = {"running": {}} if self.running.pop(0) else {"terminated": {"exitCode": 0}}
        return {"status": {"containerStatuses": [{"name": "worker", "state": state}]}}


def follow(cluster: Cluster, pattern: str) -> list[tuple[str, str | None]]:
    events: queue.Queue = queue.Queue()
    stream = _LogStream(cluster, FollowedLog("ns", "worker-0", re.compile(pattern)), events,  # type: ignore[arg-type]
                        threading.Event())
    stream.REOPEN_PAUSE_S = 0.0
    stream.run()
    seen = []
    while not events.empty():
        kind, _source, line = events.get()
        seen.append((kind, line))
    return seen


def test_a_follow_cut_while_the_container_runs_is_opened_again_without_repeating_lines():
    # The first follow is cut after two lines (the container runs on); the second replays the log
    # from its start and goes on to the checkpoint line, then ends with the container.
    cluster = Cluster(["step 1\nstep 2\n", "step 1\nstep 2\nstep 3\nsaved checkpoint at step 3\n"],
                      running=[True, False])
    seen = follow(cluster, r"step|checkpoint")
    assert cluster.opened == 2
    assert seen == [(LOG_LINE, "step 1"), (LOG_LINE, "step 2"), (LOG_LINE, "step 3"),
                    (LOG_LINE, "saved checkpoint at step 3"), (LOG_END, None)]


def test_a_follow_that_ends_with_its_container_ends_at_once():
    cluster = Cluster(["step 1\n"], running=[False])
    assert follow(cluster, r"checkpoint") == [(LOG_END, None)]
    assert cluster.opened == 1


def test_a_container_running_silent_past_every_reopen_ends_the_follow():
    reopens = _LogStream.REOPENS
    cluster = Cluster([""] * (reopens + 1), running=[True] * (reopens + 1))
    assert follow(cluster, r"checkpoint") == [(LOG_END, None)]
    assert cluster.opened == reopens + 1
