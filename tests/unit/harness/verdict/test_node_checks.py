"""The verdict of upstream's GPU node check scripts, node by node (harness/verdict/node_checks.py)."""

from __future__ import annotations

import pytest

from harness.verdict import checks
from harness.verdict.checks import CheckKind
from harness.verdict.node_checks import NodeLog, judge_node_checks

DONE = "=== all checks passed ==="
# A kind of this test's own, declared for each test only (declared for good it would be a kind no
# suite's test declares, which the generated docs refuse).
X = CheckKind("x.<node>", "an assertion of x-check.sh failed")


@pytest.fixture(autouse=True)
def _declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(checks.KINDS, X.name, X)


def messages(logs, nodes=("a", "b")):
    return [(c.name, c.status.value, c.message) for c in judge_node_checks(X, logs, list(nodes), DONE).checks]


def test_a_healthy_node_passes_with_its_skips_said():
    logs = [NodeLog("a", ("OK 1.1: fine", "SKIP 1.5: not set", DONE)), NodeLog("b", ("OK 1.1: fine", DONE))]
    assert messages(logs) == [("x.a", "pass", "x on node a: 1 passed, 1 skipped; SKIP 1.5: not set"),
                              ("x.b", "pass", "x on node b: 1 passed, 0 skipped")]


def test_a_failed_assertion_names_the_node_and_the_assertion():
    logs = [NodeLog("a", ("OK 1.1: fine", DONE)), NodeLog("b", ("FAIL 1.5: branch 570, expected 580",))]
    assert messages(logs)[1] == ("x.b", "fail", "x on node b: FAIL 1.5: branch 570, expected 580")


def test_a_log_cut_short_or_missing_fails():
    assert messages([NodeLog("a", ("OK 1.1: fine",))], ("a",)) == [
        ("x.a", "fail", "x on node a: the check did not finish (no '=== all checks passed ==='); its last line: "
                        "OK 1.1: fine")]
    assert messages([], ("a",)) == [("x.a", "fail", "x on node a: no log of its pod was captured")]
    assert messages([], ()) == [("x", "fail", "x: no node to judge")]


def test_where_the_pod_succeeded_the_log_is_beyond_upstream_and_decides_only_when_strict():
    """upstream judges the pod's phase: a node whose pod failed is named from its log; a log that fails
    where the pod succeeded is informational unless JUDGE_STRICT."""
    logs = [NodeLog("a", ("FAIL 1.5: branch 570, expected 580",)), NodeLog("b", ("OK 1.1: fine",))]

    def judged(strict: bool, failed_on: tuple[str, ...] = ("a",)):
        verdict = judge_node_checks(X, logs, ["a", "b"], DONE, pods_failed_on=failed_on, test="TestX/feature",
                                    strict=strict)
        return [(c.name, c.status.value) for c in verdict.checks], verdict

    statuses, verdict = judged(strict=False)
    assert statuses == [("x.a", "fail"), ("x.b", "informational")]
    assert verdict.checks[1].message == (
        "upstream's TestX does not judge this (JUDGE_STRICT=true or --judgeStrict makes it decide); it would fail: x "
        "on node b: the check did not finish (no '=== all checks passed ==='); its last line: OK 1.1: fine")
    assert judged(strict=True)[0] == [("x.a", "fail"), ("x.b", "fail")]
    statuses, verdict = judged(strict=False, failed_on=())
    assert statuses == [("x.a", "informational"), ("x.b", "informational")] and verdict.passed
