"""Waiting: one function, `wait_for`, over conditions on watched cluster state.

    wait_for(cluster, job_succeeded(ns, "bert-training"),
             fails_on=[job_failed(ns, "bert-training"), any_pod_failed(ns, selector, grace)],
             timeout=cfg.job_timeout, cancel=token)

The conditions live in harness.cluster.conditions, the watches under them in harness.cluster.watch. Conditions
are judged on every event, so a verdict follows the cluster's change within milliseconds, with
no polling of the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from harness.cluster.cancel import CancelToken
from harness.cluster.client import Cluster
from harness.cluster.watch import ClusterState, Source, Watcher
from harness.config.values import format_duration
from harness.errors import ClusterError, Interrupted, JobFailed, WaitTimeout

# How often time-based conditions (grace periods) are re-checked when no event arrives.
TICK_SECONDS = 0.5


def _blame_nobody(_state: ClusterState, _now: float) -> str | None:
    return None


@dataclass(frozen=True)
class Condition:
    """A named predicate over the cluster state.

    `check` returns a description when the condition holds and None while it does not; it raises
    JobFailed when what it waits for can no longer happen (a followed log ended without the line).
    `watches` are the sources it reads; `blame` names the pod to quote when it is a failure.
    """

    name: str
    watches: tuple[Source, ...]
    check: Callable[[ClusterState, float], str | None]
    blame: Callable[[ClusterState, float], str | None] = _blame_nobody


def wait_for(cluster: Cluster, condition: Condition, *, fails_on: Iterable[Condition] = (),
             timeout: float, cancel: CancelToken | None = None,
             on_event: Callable[[ClusterState], None] | None = None) -> str:
    """Wait until `condition` holds; return its description.

    Raises JobFailed when a `fails_on` condition holds first (with the pod to blame), WaitTimeout
    (message starting TIMEOUT, with the last state seen) after `timeout` seconds, Interrupted
    when `cancel` is set, ClusterError when the API refuses a watch.
    """
    failures = list(fails_on)
    sources = [source for c in (condition, *failures) for source in c.watches]
    deadline = time.monotonic() + timeout
    cancel = cancel or CancelToken()
    with Watcher(cluster, sources) as watcher:
        state = watcher.state
        while True:
            now = time.monotonic()
            if cancel.is_set():
                raise Interrupted(f"{cancel.reason} while waiting for {condition.name}; "
                                  f"last state:\n{state.summary()}")
            if now >= deadline:
                raise WaitTimeout(f"TIMEOUT: waited {format_duration(timeout)} for {condition.name}; "
                                  f"last state:\n{state.summary()}")
            try:
                watcher.receive(min(TICK_SECONDS, deadline - now))  # or a tick: grace periods may end
            except ClusterError as exc:
                raise ClusterError(f"wait for {condition.name}: {exc}") from None
            if on_event is not None:
                on_event(state)
            met = _judge(condition, failures, state, time.monotonic())
            if met is not None:
                return met


def _judge(condition: Condition, failures: list[Condition], state: ClusterState, now: float) -> str | None:
    """The condition's description when it holds; JobFailed when a failure condition holds."""
    met = condition.check(state, now)
    if met is not None:
        return met
    for failure in failures:
        reason = failure.check(state, now)
        if reason is not None:
            raise JobFailed(reason, pod=failure.blame(state, now))
    return None
