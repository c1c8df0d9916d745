"""A slow node (`hack/local-cluster node-slow`): the node agent stops the processes of the pods it
runs there a fraction of every 100 ms (SIGSTOP/SIGCONT), so they really run slower; nothing stays
stopped when the pod is deleted or the agent stops (hack/README.md, "Slow nodes").
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ..conftest import LocalCluster, run_local_cluster, wait_for, watch_pods
from .test_pod_execution import IMAGE, pid_alive, terminated

pytestmark = pytest.mark.integration

SLOW_NODE, NORMAL_NODE = "kwok-cpu-1", "kwok-cpu-0"
SLOWED_ANNOTATION = "kubetest2-training.local/slowed-by"
# A fixed amount of CPU work (about 1.5 s of one core here), its pid first, and its wall time as the
# pod saw it.
CPU_LOOP = ("import os, time; print('pid', os.getpid(), flush=True); start = time.monotonic(); "
            "sum(i * i for i in range(40_000_000)); print('wall', time.monotonic() - start, flush=True)")
# Exits 0 from its SIGTERM handler: a stopped process would never run it (SIGKILL: exit 137).
TERM_HANDLER = "trap 'echo got TERM; exit 0' TERM; echo shell $$$$; while :; do sleep 0.1; done"


@pytest.fixture
def slow_cluster(default_nodes: LocalCluster) -> Iterator[LocalCluster]:
    """The default nodes; whatever a test slows is back to full speed afterwards."""
    try:
        yield default_nodes
    finally:
        default_nodes.set_node_slow(SLOW_NODE, None)


def pinned_pod(name: str, node: str, command: list[str], grace_s: int | None = None) -> client.V1Pod:
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(
        node_name=node, restart_policy="Never", termination_grace_period_seconds=grace_s,
        containers=[client.V1Container(name="main", image=IMAGE, command=command)]))


@dataclass
class Race:
    """The same CPU loop run at once on the slow and the normal node."""

    slow_s: float  # wall times
    normal_s: float
    slow_pod: client.V1Pod
    slow_states: list[str]  # the slow node's loop's process state, sampled while it ran


def race(cluster: LocalCluster, namespace: str, prefix: str) -> Race:
    names = {node: f"{prefix}-{node}" for node in (SLOW_NODE, NORMAL_NODE)}
    for node, name in names.items():
        cluster.core.create_namespaced_pod(namespace, pinned_pod(name, node, ["python", "-c", CPU_LOOP]))
    slow_log = wait_for(lambda: "pid" in (text := log_so_far(cluster, namespace, names[SLOW_NODE])) and text, 120,
                        f"{names[SLOW_NODE]}'s pid")
    states = process_states(int(re.search(r"pid (\d+)", slow_log).group(1)), samples=100)
    walls = {}
    for node, name in names.items():
        done = watch_pods(cluster.core, namespace, lambda p, name=name: p.metadata.name == name and terminated(p),
                          120, f"{name} to finish")
        assert done.status.phase == "Succeeded", done.status
        log = cluster.core.read_namespaced_pod_log(name, namespace)
        walls[node] = float(re.search(r"^wall (\S+)$", log, re.M).group(1))
    return Race(walls[SLOW_NODE], walls[NORMAL_NODE], cluster.core.read_namespaced_pod(names[SLOW_NODE], namespace),
                states)


def log_so_far(cluster: LocalCluster, namespace: str, name: str) -> str:
    """The pod's log; empty while it has none yet (the API answers 400 before the container starts)."""
    try:
        return cluster.core.read_namespaced_pod_log(name, namespace)
    except ApiException as error:
        if error.status == 400:
            return ""
        raise


def process_states(pid: int, samples: int = 50) -> list[str]:
    """The process's state every 10 ms (T: stopped), until `samples` or its end."""
    states = []
    for _ in range(samples):
        try:
            states.append(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            break  # it ended
        time.sleep(0.01)
    return states


def running_shell(cluster: LocalCluster, namespace: str, name: str, grace_s: int) -> int:
    """Starts TERM_HANDLER on the slow node; its shell's pid once it runs."""
    cluster.core.create_namespaced_pod(namespace, pinned_pod(name, SLOW_NODE, ["sh", "-c", TERM_HANDLER], grace_s))
    watch_pods(cluster.core, namespace, lambda p: p.metadata.name == name and p.status.phase == "Running", 60,
               f"{name} to run")
    log = wait_for(lambda: "shell" in (text := cluster.core.read_namespaced_pod_log(name, namespace)) and text,
                   60, f"{name}'s pid")
    return int(re.search(r"shell (\d+)", log).group(1))


# A speed ratio between two nodes sharing 2 cores with the rest of a CI pass: the full tier's.
@pytest.mark.speed
@pytest.mark.full
def test_a_pod_on_a_slow_node_runs_slower_until_the_label_goes(slow_cluster: LocalCluster, namespace: str):
    # Stopped 75% of the time: about 4x the wall time on a quiet machine (3.7-5.0x in 4 runs). At
    # 0.5 (about 2x), a CI run in which something else took a core measured only 1.44x.
    slow_cluster.set_node_slow(SLOW_NODE, 0.75)
    slowed = race(slow_cluster, namespace, "slowed")
    print(f"slowed: {slowed.slow_s:.2f}s vs normal {slowed.normal_s:.2f}s; stopped in "
          f"{slowed.slow_states.count('T')} of {len(slowed.slow_states)} samples")
    # What the slowness is: the agent holds the process stopped, seen directly (a process nobody
    # stops is never in state T). 3/4 of the time at best; at load 16 on this 2-core machine the
    # agent's /proc scan, which adds to each period, held it to 29 and 43 of 100 samples. A tenth
    # of the samples still says the node is being slowed, not missed now and then.
    assert slowed.slow_states.count("T") >= len(slowed.slow_states) / 10, slowed.slow_states
    # And what it does: the slow node's loop is slower. Only "slower", not a ratio: on a host
    # loaded enough that the normal node's 1.5 s loop took 14.7 s (0.1 of a core), the scheduler
    # favours the loop that was stopped whenever it runs, and 4x became 1.49x (measured while four
    # engineers' clusters shared this machine); a quiet machine gives 3.7-5.0x.
    assert slowed.slow_s > slowed.normal_s, f"slow node {slowed.slow_s:.2f}s, normal node {slowed.normal_s:.2f}s"
    # The pod says its slowness was injected: annotation and event.
    assert slowed.slow_pod.metadata.annotations[SLOWED_ANNOTATION] == "0.75"
    events = slow_cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={slowed.slow_pod.metadata.name}").items
    assert any(e.reason == "Slowed" and "0.75" in e.message for e in events), [e.reason for e in events]

    slow_cluster.set_node_slow(SLOW_NODE, None)
    after = race(slow_cluster, namespace, "restored")
    print(f"restored: {after.slow_s:.2f}s vs normal {after.normal_s:.2f}s; {len(after.slow_states)} samples")
    # Never stopped once the label is gone (a stopped sample would be the agent still cycling it).
    assert after.slow_states and "T" not in after.slow_states, after.slow_states
    # As fast as the normal node again: about 1x, a node still slowed 3.7x or more on a quiet host.
    # 1.3x was less room than a loaded 2-core host gives two identical loops (a 5 s window at 0.53
    # of the fastest); 2.5x holds for one loop at 40% of the other's speed.
    assert after.slow_s < 2.5 * after.normal_s, f"label removed: {after.slow_s:.2f}s vs {after.normal_s:.2f}s"
    assert SLOWED_ANNOTATION not in (after.slow_pod.metadata.annotations or {})


def test_deleting_a_pod_on_a_slow_node_lets_it_handle_sigterm(slow_cluster: LocalCluster, namespace: str):
    slow_cluster.set_node_slow(SLOW_NODE, 0.9)
    shell = running_shell(slow_cluster, namespace, "doomed", grace_s=20)
    assert "T" in process_states(shell), "the slow node's process was never stopped"
    started = time.monotonic()
    slow_cluster.core.delete_namespaced_pod("doomed", namespace)
    done = watch_pods(slow_cluster.core, namespace, lambda p: p.metadata.name == "doomed" and terminated(p), 30,
                      "doomed to end")
    # Ended by its own SIGTERM handler (exit 0: a SIGKILL gives 137), within the 20 s grace, not
    # SIGKILLed after it. (10 s was a guess at the handler's speed; the grace is what is promised.)
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert time.monotonic() - started < 20
    wait_for(lambda: not pid_alive(shell), 30, "the shell to be gone")


def session_states(session: int) -> dict[int, str]:
    """State of every process of a session (the container's: its shell leads it), zombies included."""
    states = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[3]) == session:
            states[int(stat.parent.name)] = fields[0]
    return states


def test_stopping_the_agent_leaves_no_process_stopped(slow_cluster: LocalCluster, namespace: str):
    slow_cluster.set_node_slow(SLOW_NODE, 0.9)
    shell = running_shell(slow_cluster, namespace, "orphan", grace_s=20)
    assert "T" in process_states(shell), "the slow node's process was never stopped"
    run_local_cluster("restart", "node-agent")
    # No process of the container is left stopped (state T) ...
    left = session_states(shell)
    assert "T" not in left.values(), left
    assert not [pid for pid, state in left.items() if state not in ("Z", "X")], left
    # ... and the agent resumed the shell before its SIGTERM: the handler ran (no SIGKILL 5 s later).
    assert "got TERM" in slow_cluster.core.read_namespaced_pod_log("orphan", namespace)
