"""Every check is of a kind declared once beside the code that judges it (harness.verdict.checks.declare):
the generated docs list the kinds, so a check of no declared kind must not reach a verdict."""

from __future__ import annotations

import pytest

from harness.verdict import checks
from harness.verdict.checks import Check, CheckKind, Status, UndeclaredCheck, Verdict, declare, kind_of
from harness.verdict.stragglers import STRAGGLER
from harness.verdict.training import LOSS
from testbins.suites import all_suites


@pytest.fixture
def kinds(monkeypatch: pytest.MonkeyPatch) -> dict[str, CheckKind]:
    """The declared kinds, restored after the test (declare adds to them)."""
    saved = dict(checks.KINDS)
    monkeypatch.setattr(checks, "KINDS", saved)
    return saved


def test_a_kind_declared_twice_is_refused(kinds: dict[str, CheckKind]):
    declare("extra.kind", "never")
    with pytest.raises(ValueError, match="check extra.kind is declared twice"):
        declare("extra.kind", "again")


def test_a_declaration_keeps_its_words_on_one_line(kinds: dict[str, CheckKind]):
    kind = declare("extra.words", "a node   is\n    slow", "`X`\n  x 2", only_when="on\n GPUs")
    assert (kind.fails_when, kind.threshold_from, kind.only_when) == ("a node is slow", "`X` x 2", "on GPUs")


def test_a_verdict_refuses_a_check_of_no_declared_kind():
    with pytest.raises(UndeclaredCheck, match="'no.such' is of no declared kind"):
        Verdict([Check.passed("no.such", "fine")])
    verdict = Verdict()
    with pytest.raises(UndeclaredCheck):
        verdict.add(Check.failed("no.such", "bad"))
    assert verdict.checks == []
    verdict.add(LOSS.passed("fell"))
    assert [c.name for c in verdict.checks] == ["loss"]


def test_a_check_read_back_from_a_record_may_carry_any_name():
    # a report reads result.json of other versions: Check itself does not judge names
    assert Check("renamed.since", Status.PASS, "old").name == "renamed.since"


def test_a_kind_with_a_part_makes_its_parts_and_its_stem():
    assert STRAGGLER.named("probe_matmul_tflops") == "straggler.probe_matmul_tflops"
    assert STRAGGLER.named() == "straggler"
    assert kind_of("straggler.tokens_per_s") is STRAGGLER and kind_of("straggler") is STRAGGLER
    assert kind_of("stragglerx") is None and kind_of("straggler.") is None
    assert kind_of("loss") is LOSS and kind_of("loss.x") is None
    with pytest.raises(ValueError, match="check loss has no <part>"):
        LOSS.named("x")
    check = STRAGGLER.failed("slow", part="compute_ms_per_step", measured=2.0)
    assert (check.name, check.status, check.measured) == ("straggler.compute_ms_per_step", Status.FAIL, 2.0)


def test_every_test_declares_only_declared_kinds_and_says_what_it_launches():
    for suite in all_suites():
        for test in suite.tests:
            assert test.launches, f"{suite.binary} {test.name} declares no launches"
            for kind in test.checks:
                assert checks.KINDS.get(kind.name) is kind, f"{test.name}: {kind.name}"
