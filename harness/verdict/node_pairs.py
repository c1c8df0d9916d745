"""TestNodePairs' planning and judging, pure functions: which nodes run an all-reduce together in
each of two passes, and which node is slow.

Plan: pass 1 groups neighbours in the given order, (0,1)(2,3)...; pass 2 pairs each node with the one
half the list away, (i, i+n/2), so no two nodes share a group in both passes (n even, n >= 4). An
odd count: pass 1's last pair takes the odd node as a triple, and in pass 2 the odd node joins the
pair (0, m) (n = 2m+1 >= 7). Every group of a pass runs at the same time. Below 4 nodes, and at 5
(one pair and one triple per pass cannot avoid sharing two nodes twice), some nodes share a group in
both passes: `inseparable` names them, and the judgement says so.

Judge: a group is slow when its figure (bus bandwidth, GB/s; higher is better) is below `fraction` x
the upper quartile of its pass's groups (a minority of slow groups cannot drag the reference down);
a node is slow in a pass when its group is. A node slow in both passes fails; a node slow in one
pass only passes (its partner there was the slow one).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Group = tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The groups of both passes, and node pairs that share a group in both (not separable)."""

    passes: tuple[tuple[Group, ...], tuple[Group, ...]]
    inseparable: tuple[tuple[str, str], ...] = ()


def _pass_one(nodes: Sequence[str]) -> list[Group]:
    groups = [tuple(nodes[i:i + 2]) for i in range(0, len(nodes) - len(nodes) % 2, 2)]
    if len(nodes) % 2:
        groups[-1] = (*groups[-1], nodes[-1])
    return groups


def _pass_two(nodes: Sequence[str]) -> list[Group]:
    n = len(nodes)
    half = n // 2
    groups = [(nodes[i], nodes[i + half]) for i in range(half)]
    if n % 2:
        groups[0] = (*groups[0], nodes[-1])  # (0, m, 2m): clear of pass 1's triple from 7 nodes up
    return groups


def _together(groups: Sequence[Group]) -> set[frozenset[str]]:
    return {frozenset((a, b)) for g in groups for i, a in enumerate(g) for b in g[i + 1:]}


def plan(nodes: Sequence[str]) -> Plan:
    """Two passes over `nodes` (module docstring); at least 2 nodes."""
    if len(nodes) < 2:
        raise ValueError(f"TestNodePairs needs at least 2 nodes, got {len(nodes)}")
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"node names repeat: {sorted(nodes)}")
    first, second = _pass_one(nodes), _pass_two(nodes)
    twice = _together(first) & _together(second)
    inseparable = tuple(sorted((a, b) for a, b in (sorted(pair) for pair in twice)))
    return Plan((tuple(first), tuple(second)), inseparable)


@dataclass(frozen=True)
class NodeResult:
    """One node's judgement: its group and figure in each pass, and whether it was slow there."""

    node: str
    partners: tuple[tuple[str, ...], tuple[str, ...]]
    figures: tuple[float | None, float | None]
    slow: tuple[bool, bool]
    thresholds: tuple[float, float]
    inseparable_from: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return all(self.slow)

    def message(self, unit: str = "GB/s") -> str:
        parts = []
        for i in (0, 1):
            figure = "no figure" if self.figures[i] is None else f"{self.figures[i]:.4g} {unit}"
            parts.append(f"pass {i + 1} with {', '.join(self.partners[i])}: {figure} "
                         f"({'slow' if self.slow[i] else 'ok'}, threshold {self.thresholds[i]:.4g})")
        verdict = ("slow in both passes, with different partners: this node is slow" if self.failed else
                   "slow in one pass only (its partner there was the slow one)" if any(self.slow) else
                   "not slow in either pass")
        caveat = (f"; shares a group with {', '.join(self.inseparable_from)} in both passes, so they cannot be told "
                  f"apart" if self.inseparable_from else "")
        return f"{self.node}: {verdict}; " + "; ".join(parts) + caveat


def _threshold(figures: Sequence[float], fraction: float) -> float:
    if len(figures) == 1:
        return figures[0] * fraction  # one group: compared with itself, never slow on its own
    upper = statistics.quantiles(figures, n=4, method="inclusive")[2]
    return upper * fraction


def judge(the_plan: Plan, figures: Sequence[Mapping[Group, float | None]], fraction: float) -> list[NodeResult]:
    """Each node's result (module docstring). figures[p][group]: the group's figure in pass p (None:
    the group reported none, which counts as slow)."""
    per_pass = []
    for p in (0, 1):
        measured = [f for g in the_plan.passes[p] if (f := figures[p].get(g)) is not None]
        threshold = _threshold(measured, fraction) if measured else float("inf")
        per_pass.append((threshold, {node: g for g in the_plan.passes[p] for node in g}))
    inseparable: dict[str, list[str]] = {}
    for a, b in the_plan.inseparable:
        inseparable.setdefault(a, []).append(b)
        inseparable.setdefault(b, []).append(a)
    results = []
    nodes = [node for g in the_plan.passes[0] for node in g]
    for node in nodes:
        groups = [per_pass[p][1][node] for p in (0, 1)]
        values = [figures[p].get(groups[p]) for p in (0, 1)]
        slow = (values[0] is None or values[0] < per_pass[0][0], values[1] is None or values[1] < per_pass[1][0])
        partners = (tuple(n for n in groups[0] if n != node), tuple(n for n in groups[1] if n != node))
        results.append(NodeResult(node, partners, (values[0], values[1]), slow, (per_pass[0][0], per_pass[1][0]),
                                  tuple(inseparable.get(node, ()))))
    return results
