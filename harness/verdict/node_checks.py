"""The verdict of a node-level check script (upstream's GPU node suites: driver liveness, CUDA compute,
fabric manager, GSP firmware, device nodes, shared libraries), judged from each node's log.

The scripts (manifests/scripts/*-check.sh) print one line per assertion, `OK <id>: ...`,
`SKIP <id>: ...` or `FAIL <id>: ...`, and end with a line saying every assertion passed (their
`done` line) before they exit 0; a failed assertion exits non-zero with upstream's code. Upstream
judges the pod's phase alone; here each node of the run is judged on its log as well, so a node is
named with the assertion it failed, and a log that stops before its `done` line (a script cut
short, a container that never ran it) fails instead of passing on an exit status nobody saw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.verdict.checks import CheckKind, Verdict, declare

# `OK 1.5: every GPU ...`, `SKIP 5.3: not an NVSwitch node`, `FAIL 7.3: /dev/nvidia0 is missing`.
ASSERTION = re.compile(r"^(?P<status>OK|SKIP|FAIL) (?P<id>[\w.+-]+): (?P<text>.*)$")


@dataclass(frozen=True)
class NodeLog:
    """The lines one node's check pod printed (current container instance)."""

    node: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """What a node's log says: its assertions by status, and whether the script got to its end."""

    node: str
    ok: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[str, ...]
    done: bool
    last_line: str


def read_outcome(log: NodeLog, done_line: str) -> Outcome:
    found: dict[str, list[str]] = {"OK": [], "SKIP": [], "FAIL": []}
    for line in log.lines:
        match = ASSERTION.match(line.strip())
        if match:
            found[match["status"]].append(f"{match['status']} {match['id']}: {match['text']}")
    done = any(line.strip() == done_line for line in log.lines)
    last = next((line.strip() for line in reversed(log.lines) if line.strip()), "")
    return Outcome(log.node, tuple(found["OK"]), tuple(found["SKIP"]), tuple(found["FAIL"]), done, last)


def declare_node_check(check: str, script: str) -> CheckKind:
    """The kind `<check>.<node>` of one node check script, declared by the suite module that runs it."""
    return declare(f"{check}.<node>", f"an assertion of `manifests/scripts/{script}` failed on the node (`FAIL <id>: "
                   "...`), or its log stops before the script's last line, or its pod left no log",
                   "the script's own assertions")


def judge_node_checks(kind: CheckKind, logs: Iterable[NodeLog], nodes: Sequence[str], done_line: str) -> Verdict:
    """One check of `kind` per node of `nodes` (`<check>.<node>`): failing with the first failed assertion, or
    because its log never reached `done_line` (or no log was captured); passing with what was
    asserted and what was skipped and why."""
    by_node = {log.node: log for log in logs}
    check = kind.stem
    checks = []
    for node in nodes:
        log = by_node.get(node)
        if log is None:
            checks.append(kind.failed(f"{check} on node {node}: no log of its pod was captured", part=node))
            continue
        outcome = read_outcome(log, done_line)
        if outcome.failed:
            more = f" (and {len(outcome.failed) - 1} more)" if len(outcome.failed) > 1 else ""
            checks.append(kind.failed(f"{check} on node {node}: {outcome.failed[0]}{more}", part=node))
        elif not outcome.done:
            checks.append(kind.failed(f"{check} on node {node}: the check did not finish (no {done_line!r}); its "
                                      f"last line: {outcome.last_line or '<empty log>'}", part=node))
        else:
            skipped = f"; {'; '.join(outcome.skipped)}" if outcome.skipped else ""
            checks.append(kind.passed(f"{check} on node {node}: {len(outcome.ok)} passed, "
                                      f"{len(outcome.skipped)} skipped{skipped}", part=node))
    if not checks:
        checks.append(kind.failed(f"{check}: no node to judge"))
    return Verdict(checks)
