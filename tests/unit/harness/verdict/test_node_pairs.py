"""TestNodePairs' plan and judgement (harness/verdict/node_pairs.py): every node in one group a pass,
no two nodes together in both passes from 4 nodes up (but 5), a node slow in both passes fails and no other."""

from __future__ import annotations

import pytest

from harness.verdict.node_pairs import judge, plan


@pytest.mark.parametrize("n", [*range(2, 40), 101, 1000, 1001])
def test_every_node_is_in_one_group_a_pass_and_pairs_differ_between_passes(n):
    nodes = [f"n{i}" for i in range(n)]
    the_plan = plan(nodes)
    for groups in the_plan.passes:
        assert sorted(node for g in groups for node in g) == sorted(nodes)
        assert all(2 <= len(g) <= 3 for g in groups)
    assert (the_plan.inseparable == ()) == (n >= 4 and n != 5), the_plan.inseparable


def figures(the_plan, slow, healthy=40.0, factor=0.6):
    return [{g: healthy * (factor if slow in g else 1.0) for g in groups} for groups in the_plan.passes]


@pytest.mark.parametrize("n", [4, 6, 7, 9, 16, 33])
@pytest.mark.parametrize("which", [0, 1, -1])
def test_the_node_slow_in_both_passes_fails_and_no_other(n, which):
    nodes = [f"kwok-cpu-{i}" for i in range(n)]
    the_plan = plan(nodes)
    slow = nodes[which]
    results = judge(the_plan, figures(the_plan, slow), 0.8)
    assert [r.node for r in results if r.failed] == [slow]
    (named,) = [r for r in results if r.failed]
    assert named.message().startswith(f"{slow}: slow in both passes, with different partners")
    partners = [r for r in results if any(r.slow) and not r.failed]
    assert partners and all("slow in one pass only" in r.message() for r in partners)


def test_a_group_that_reported_nothing_counts_as_slow_and_a_healthy_run_passes():
    the_plan = plan(["a", "b", "c", "d"])
    assert not any(r.failed for r in judge(the_plan, figures(the_plan, "none"), 0.8))
    broken = figures(the_plan, "none")
    for p in (0, 1):
        broken[p] = {g: (None if "c" in g else v) for g, v in broken[p].items()}
    assert [r.node for r in judge(the_plan, broken, 0.8) if r.failed] == ["c"]


def test_inseparable_nodes_say_so():
    the_plan = plan(["a", "b"])
    results = judge(the_plan, figures(the_plan, "a"), 0.8)
    assert "shares a group with b in both passes" in results[0].message()
    with pytest.raises(ValueError, match="at least 2 nodes"):
        plan(["a"])


def test_the_report_draws_both_passes_per_node():
    from harness.report.html import node_pairs_section
    from harness.report.inputs import _node_pairs

    the_plan = plan(["kwok-cpu-0", "kwok-cpu-1", "kwok-cpu-2", "kwok-cpu-3"])
    results = judge(the_plan, figures(the_plan, "kwok-cpu-1"), 0.8)
    # What testbins/nvidia/node_pairs.py's TestNodePairs stores in result.json's node_pairs.
    raw = {"nodes": {r.node: {"partners": [list(x) for x in r.partners], "busbw_gbps": list(r.figures),
                              "thresholds": list(r.thresholds), "slow": list(r.slow), "failed": r.failed}
                     for r in results}}
    html = node_pairs_section(_node_pairs(raw), "t-pairs")
    assert html.count("<svg") == 2 and 'id="t-pairs-1"' in html and 'id="t-pairs-2"' in html
    assert "pair all-reduce bus bandwidth (GB/s). Slow: kwok-cpu-0, kwok-cpu-1." in html
    assert "bandwidth (GB/s). Slow: kwok-cpu-1, kwok-cpu-3." in html
    assert html.count("FAIL: slow in both passes") == 1 and "<td>kwok-cpu-1</td>" in html
    assert node_pairs_section([], "x") == ""
