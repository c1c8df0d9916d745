"""The verdict of a node-level check script (upstream's GPU node suites: driver liveness, CUDA compute,
fabric manager, GSP firmware, device nodes, shared libraries), judged from each node's log.

The scripts (manifests/scripts/*-check.sh) print one line per assertion, `OK <id>: ...`,
`SKIP <id>: ...` or `FAIL <id>: ...`, and end with a line saying every assertion passed (their
`done` line) before they exit 0; a failed assertion exits non-zero with upstream's code. Upstream
judges the pod's phase alone; here each node of the run is judged on its log as well, so a node is
named with the assertion it failed. Where the node's pod failed, upstream fails the run too and the
log only says why. Where it succeeded, a failed assertion or a log that stops before its `done`
line (a script cut short, a container that never ran it) is beyond upstream's criterion: it decides
only when asked (JUDGE_STRICT), else it is recorded as informational (docs/DROP-IN.md).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from harness.verdict.checks import Check, CheckKind, Verdict, beyond_upstream, declare

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
                   "...`), or its log stops before the script's last line, or its pod left no log. Where the "
                   "node's pod succeeded, informational unless JUDGE_STRICT (upstream judges the pod's phase)",
                   "the script's own assertions", settings=("JUDGE_STRICT",))


def judge_node(kind: CheckKind, log: NodeLog | None, node: str, done_line: str) -> Check:
    """The check `<check>.<node>` of one node: failing with its first failed assertion, or because its
    log never reached `done_line` (or no log was captured); passing with what was asserted and what
    was skipped and why."""
    check = kind.stem
    if log is None:
        return kind.failed(f"{check} on node {node}: no log of its pod was captured", part=node)
    outcome = read_outcome(log, done_line)
    if outcome.failed:
        more = f" (and {len(outcome.failed) - 1} more)" if len(outcome.failed) > 1 else ""
        return kind.failed(f"{check} on node {node}: {outcome.failed[0]}{more}", part=node)
    if not outcome.done:
        return kind.failed(f"{check} on node {node}: the check did not finish (no {done_line!r}); its last "
                           f"line: {outcome.last_line or '<empty log>'}", part=node)
    skipped = f"; {'; '.join(outcome.skipped)}" if outcome.skipped else ""
    return kind.passed(f"{check} on node {node}: {len(outcome.ok)} passed, {len(outcome.skipped)} skipped{skipped}",
                       part=node)


def judge_node_checks(kind: CheckKind, logs: Iterable[NodeLog], nodes: Sequence[str], done_line: str, *,
                      pods_failed_on: Collection[str] | None = None, test: str = "",
                      strict: bool = False) -> Verdict:
    """One check of `kind` per node of `nodes` (judge_node). With `pods_failed_on` (the nodes whose pod
    failed: upstream's verdict, the pod's phase), the check of every other node is beyond upstream's
    `test` and decides only when `strict`; None: every check decides (no upstream verdict to keep)."""
    by_node = {log.node: log for log in logs}
    verdict = Verdict()
    for node in nodes:
        judged = judge_node(kind, by_node.get(node), node, done_line)
        upstream_decides = pods_failed_on is None or node in pods_failed_on
        verdict.add(judged if upstream_decides else beyond_upstream([judged], test, strict))
    if not verdict.checks:
        verdict.add(kind.failed(f"{kind.stem}: no node to judge"))
    return verdict
