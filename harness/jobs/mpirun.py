"""What an MPIJob's pods and its launcher's mpirun log say after a failure: the roles of the pods,
the launcher's runs, each rank's last tagged lines, mpirun's own words (OpenMPI 4), the workers it
lost and the rank that failed first; and the failure message made of them.

mpirun prints its errors untagged between rules of dashes; ssh's `Connection to <host> closed by
remote host.` and `... on node <host>` name a lost worker by its hostfile name
(`<pod>.<job>.<namespace>.svc`, so its first label is the worker pod); a rank's own output is
tagged `[1,<rank>]<stdout|stderr>:`. mpirun exits with the first failed rank's exit code.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.cluster.logs import CapturedLog
from harness.cluster.pods import node_of, pod_role
from harness.cluster.resources import Obj
from harness.metrics.log_lines import split_tag
from harness.metrics.records import read_lines

RULE = re.compile(r"^-{20,}\s*$")
SSH_CLOSED = re.compile(r"^Connection to (?P<host>\S+) closed by remote host\.")
ON_NODE = re.compile(r"\bon node (?P<host>[A-Za-z0-9][-A-Za-z0-9.]*[A-Za-z0-9])")
FIRST_FAILED = re.compile(r"^\s*Process name:\s*\[\[\d+,\d+\],(?P<rank>\d+)\]")
EXIT_CODE = re.compile(r"^\s*Exit code:\s*(?P<code>-?\d+)")
SIGNALLED = re.compile(r"mpirun noticed that process rank (?P<rank>\d+) with PID \d+ on node \S+ "
                       r"exited on signal (?P<signal>\d+)")
# mpirun's warnings about -x names the launcher's env lacks (LD_LIBRARY_PATH on CPU images).
MISSING_VARIABLE = re.compile(r'^\[[^\]]+\] Warning: could not find environment variable ')
WORDS_KEPT = 40


def _phase(pod: Obj) -> str:
    return pod.get("status", {}).get("phase", "Pending")


def launcher_pods(pods: Iterable[Obj]) -> list[Obj]:
    """The launcher's pods (one per run: restartPolicy Never), oldest first."""
    found = [pod for pod in pods if pod_role(pod) == "launcher"]
    return sorted(found, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]))


def launcher_runs(pods: Iterable[Obj]) -> tuple[int, int]:
    """(runs, failed runs) of the launcher: its Job's pods, and those that failed."""
    launchers = launcher_pods(pods)
    return len(launchers), sum(1 for pod in launchers if _phase(pod) == "Failed")


def exit_code(pod: Obj) -> int | None:
    """The exit code of the pod's first terminated container."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return int(terminated.get("exitCode", 0))
    return None


@dataclass
class MpirunLog:
    """One launcher run's log, read once."""

    rank_tails: dict[int, deque[str]] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)  # mpirun's and ssh's own lines
    headlines: list[str] = field(default_factory=list)  # the first line of each of mpirun's messages
    hosts: list[str] = field(default_factory=list)  # hosts named as lost or failing, in order
    failed_rank: int | None = None
    failed_code: int | None = None
    failed_signal: int | None = None


def read_mpirun_log(lines: Iterable[str], tail: int = 20) -> MpirunLog:
    """Parse a launcher's log: the last `tail` lines of each rank, mpirun's words, lost hosts."""
    parsed = MpirunLog()
    in_message, message_started = False, False  # mpirun's messages open and close with a rule
    for raw in lines:
        line = raw.rstrip("\r\n")
        rank, _ = split_tag(line)
        if rank is not None:
            parsed.rank_tails.setdefault(rank, deque(maxlen=tail)).append(line)
            continue
        if RULE.match(line):
            in_message, message_started = not in_message, False
            continue
        if not line.strip() or line.startswith("=== ") or MISSING_VARIABLE.match(line):
            continue
        if (in_message and not message_started) or SSH_CLOSED.match(line):
            parsed.headlines.append(line.strip())
        message_started = in_message
        if len(parsed.words) < WORDS_KEPT:
            parsed.words.append(line)
        _note_failure(parsed, line)
    return parsed


def _note_failure(parsed: MpirunLog, line: str) -> None:
    """Hosts named, and the first failed rank with its exit code or signal."""
    for pattern in (SSH_CLOSED, ON_NODE):
        match = pattern.search(line)
        if match and match["host"] not in parsed.hosts:
            parsed.hosts.append(match["host"])
    if (match := FIRST_FAILED.match(line)) and parsed.failed_rank is None:
        parsed.failed_rank = int(match["rank"])
    elif (match := EXIT_CODE.match(line)) and parsed.failed_code is None:
        parsed.failed_code = int(match["code"])
    elif (match := SIGNALLED.search(line)) and parsed.failed_rank is None:
        parsed.failed_rank, parsed.failed_signal = int(match["rank"]), int(match["signal"])


def _launcher_to_quote(pods: Mapping[str, Obj]) -> Obj | None:
    """The launcher run that ended last (a newer retry may have started since), else the newest."""
    launchers = launcher_pods(pods.values())
    ended = [pod for pod in launchers if _phase(pod) in ("Failed", "Succeeded")]
    return (ended or launchers or [None])[-1]


def _log_of(captured: list[CapturedLog], pod: str) -> CapturedLog | None:
    return next((e for e in captured if e.pod == pod and not e.previous and e.path.exists()), None)


def explain_failure(reason: str, pods: Mapping[str, Obj], captured: list[CapturedLog],
                    locations: Mapping[int, tuple[str, str]]) -> str | None:
    """The failure message of an MPIJob: `reason`, then what mpirun said in the launcher run that
    ended last (its exit code; the failed rank with its pod and node, or the worker it lost, or its
    first words) and how many times the launcher ran; then mpirun's words and the failed rank's
    last lines. None when no launcher ran (the generic message applies)."""
    launcher = _launcher_to_quote(pods)
    entry = _log_of(captured, launcher["metadata"]["name"]) if launcher else None
    if launcher is None or entry is None:
        return None
    parsed = read_mpirun_log(read_lines(entry.path))
    runs, failed = launcher_runs(pods.values())
    retries = f"; the launcher ran {runs} times ({failed} failed; its Job retried it)" if runs > 1 else ""
    detail = [f"{reason}; {_what_mpirun_said(launcher, parsed, pods, locations)}{retries}"]
    name = launcher["metadata"]["name"]
    if parsed.words:
        detail += [f"mpirun's own lines in {name}:", *(f"  {w}" for w in parsed.words)]
    rank = parsed.failed_rank
    if rank is not None and rank in parsed.rank_tails:
        detail += [f"last {len(parsed.rank_tails[rank])} lines of rank {rank}:", *parsed.rank_tails[rank]]
    return "\n".join(detail)


def _what_mpirun_said(launcher: Obj, parsed: MpirunLog, pods: Mapping[str, Obj],
                      locations: Mapping[int, tuple[str, str]]) -> str:
    """One clause: mpirun's exit code and the rank that failed first, else the worker it lost,
    else its first words."""
    code = exit_code(launcher)
    said = f"mpirun in launcher pod {launcher['metadata']['name']} on node {node_of(launcher)} " + (
        f"exited with code {code}" if code is not None else "had not exited")
    workers = {name: pod for name, pod in pods.items() if pod_role(pod) == "worker"}
    lost = lost_worker_hosts(parsed, workers)
    if parsed.failed_rank is not None:
        pod, node = locations.get(parsed.failed_rank, ("?", "?"))
        how = (f"signal {parsed.failed_signal}" if parsed.failed_signal is not None
               else f"code {parsed.failed_code}")
        said += f": rank {parsed.failed_rank} (pod {pod}, node {node}) exited first, with {how}"
    elif lost:
        said += f": lost worker {lost[0]} (node {node_of(workers[lost[0]])})"
        said += f": {parsed.headlines[0]}" if parsed.headlines else ""
    elif parsed.headlines:
        said += f": {parsed.headlines[0]}"
    return said


def lost_worker_hosts(parsed: MpirunLog, worker_names: Iterable[str]) -> list[str]:
    """The workers (pod names) among the hosts mpirun or ssh named: a hostfile name's first label."""
    workers = set(worker_names)
    return [host.split(".")[0] for host in parsed.hosts if host.split(".")[0] in workers]
