"""A verdict as a list of named checks, each pass / fail / not-applicable / informational with its message.

A test fails when any check fails; its failure message is the first failing check's. Every check
is recorded (JUnit `check.<name>` = `status: message`, `checks.ran`, result.json `checks`), so a
reader sees what was judged, what passed and what did not apply and why. An informational check was
judged but does not decide the verdict (our extra checks under upstream's test names, where upstream
judges nothing of the kind): its message says what it found and what would make it decide.

Every check is of a kind declared once, beside the code that judges it (`declare`): its name, when
it fails, where its threshold comes from and the settings that change it. docs/TESTS.md and
docs/VERDICTS.md are generated from those declarations (testbins/catalogue.py), and a check of a kind
not declared cannot be made (Check raises), so no check can be missing from the pages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from harness.errors import TestFailure, ThresholdMissed

# Check.execution of a check judged on data the local cluster wrote rather than measured (emulated
# node capacity), as a pod's execution says `canned` for a served log.
EMULATED = "emulated"


# The `<...>` end of a declared name stands for what each check of the kind is about:
# `straggler.<key>` makes straggler.probe_matmul_tflops, `driver_liveness.<node>` one check per node.
NAME_PART = re.compile(r"\.<[a-z_]+>$")


@dataclass(frozen=True)
class CheckKind:
    """A check as declared where it is judged: what the catalogue and the verdict page say of it."""

    name: str
    fails_when: str
    # Where the threshold comes from ("-": none, the check is a fact about the run).
    threshold_from: str = "-"
    # The settings (env names, or --flags for flag-only settings) that change what it judges.
    settings: tuple[str, ...] = ()
    # When a test that declares it makes it only in some runs: in which ("" : in every run).
    only_when: str = ""

    @property
    def stem(self) -> str:
        """The name without its `.<part>`: `straggler` for `straggler.<key>`, the name itself otherwise."""
        return NAME_PART.sub("", self.name)

    @property
    def has_part(self) -> bool:
        return self.stem != self.name

    def matches(self, check_name: str) -> bool:
        """Whether a check of this name is of this kind (`straggler.probe` is `straggler.<key>`; a
        kind with a part also makes its bare stem, for the whole: `driver_liveness` with no node)."""
        if not self.has_part:
            return check_name == self.name
        return check_name == self.stem or (check_name.startswith(self.stem + ".")
                                           and len(check_name) > len(self.stem) + 1)

    def named(self, part: str = "") -> str:
        """The name of one check of this kind: `part` fills `<...>`; none, the bare stem (the whole)."""
        if part and not self.has_part:
            raise ValueError(f"check {self.name} has no <part> to fill with {part!r}")
        return f"{self.stem}.{part}" if part else self.stem

    def passed(self, message: str, *, part: str = "", **figures: Any) -> Check:
        return Check(self.named(part), Status.PASS, message, **figures)

    def failed(self, message: str, *, part: str = "", **figures: Any) -> Check:
        return Check(self.named(part), Status.FAIL, message, **figures)

    def not_applicable(self, message: str, *, part: str = "") -> Check:
        return Check(self.named(part), Status.NOT_APPLICABLE, message)


# Every declared kind by name, in declaration order (the verdict page's order).
KINDS: dict[str, CheckKind] = {}


def declare(name: str, fails_when: str, threshold_from: str = "-", settings: tuple[str, ...] = (),
            only_when: str = "") -> CheckKind:
    """Declare a kind of check, once, in the module that judges it."""
    if name in KINDS:
        raise ValueError(f"check {name} is declared twice")
    KINDS[name] = kind = CheckKind(name, " ".join(fails_when.split()), " ".join(threshold_from.split()), settings,
                                   " ".join(only_when.split()))
    return kind


def kind_of(check_name: str) -> CheckKind | None:
    """The declared kind a check of this name is of, or None."""
    if check_name in KINDS:
        return KINDS[check_name]
    return next((kind for kind in KINDS.values() if kind.has_part and kind.matches(check_name)), None)


class UndeclaredCheck(ValueError):
    """A check judged under a name no `declare` gave: the docs would not list it."""


def require_declared(check: Check) -> Check:
    """The check, when it is of a declared kind. Checked where a verdict takes it (Verdict), not in
    Check itself: a report reads back checks of other versions' records, whatever their names."""
    if kind_of(check.name) is None:
        raise UndeclaredCheck(f"check {check.name!r} is of no declared kind (harness.verdict.checks.declare, "
                              "beside the code that judges it): docs/TESTS.md and docs/VERDICTS.md would lack it")
    return check


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not-applicable"
    INFORMATIONAL = "informational"


@dataclass(frozen=True)
class Check:
    """One check's outcome; measured/expected/unit when it compared a figure with a threshold."""

    name: str
    status: Status
    message: str
    # The figure compared and the threshold it was compared with, when there was one.
    measured: float | None = None
    expected: float | None = None
    unit: str = ""
    # A threshold missed (ThresholdMissed) rather than a broken run (TestFailure).
    threshold: bool = False
    # Where the data judged came from when it was not the cluster's own: EMULATED, else "".
    execution: str = ""

    @classmethod
    def passed(cls, name: str, message: str, **figures: Any) -> Check:
        return cls(name, Status.PASS, message, **figures)

    @classmethod
    def failed(cls, name: str, message: str, **figures: Any) -> Check:
        return cls(name, Status.FAIL, message, **figures)

    @classmethod
    def not_applicable(cls, name: str, message: str) -> Check:
        return cls(name, Status.NOT_APPLICABLE, message)

    def informational(self, why: str) -> Check:
        """This check recorded without deciding the verdict: its message keeps what it found (`would
        fail: ...`) after `why` (what would make it decide)."""
        found = {Status.PASS: "passes", Status.FAIL: "would fail",
                 Status.NOT_APPLICABLE: "not applicable"}.get(self.status, str(self.status.value))
        return replace(self, status=Status.INFORMATIONAL, threshold=False,
                       message=f"{why}; it {found}: {self.message}")

    def on_emulated(self, what: str) -> Check:
        """This check marked as judged on emulated data (`what` says which): execution EMULATED, and
        its message says so, in the log, JUnit and a failure's reason alike."""
        return replace(self, execution=EMULATED, message=f"{self.message} [{EMULATED}: {what}]")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status.value, "message": self.message}
        for key in ("measured", "expected"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.unit:
            out["unit"] = self.unit
        if self.execution:
            out["execution"] = self.execution
        return out


@dataclass
class Verdict:
    """Every check of one test, in the order they ran, and what the report draws beside them."""

    checks: list[Check] = field(default_factory=list)
    # Lines drawn on the per-rank charts (result.json metrics.references) and the ranks named slow.
    references: dict[str, dict[str, Any]] = field(default_factory=dict)
    slow_ranks: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        for check in self.checks:
            require_declared(check)

    def add(self, checks: Check | Iterable[Check]) -> None:
        self.checks.extend(require_declared(c) for c in ([checks] if isinstance(checks, Check) else checks))

    def extend(self, other: Verdict) -> None:
        self.checks.extend(other.checks)
        self.references.update(other.references)
        self.slow_ranks |= other.slow_ranks

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.FAIL]

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """`N checks: passed a, b; not applicable: c (why); failed: d`."""
        by_status = {s: [c for c in self.checks if c.status is s] for s in Status}
        parts = [f"{len(self.checks)} checks ran"]
        if by_status[Status.PASS]:
            parts.append("passed: " + ", ".join(c.name for c in by_status[Status.PASS]))
        if by_status[Status.NOT_APPLICABLE]:
            not_applicable = by_status[Status.NOT_APPLICABLE]
            parts.append("not applicable: " + ", ".join(f"{c.name} ({c.message})" for c in not_applicable))
        if by_status[Status.INFORMATIONAL]:
            parts.append("informational: " + ", ".join(c.name for c in by_status[Status.INFORMATIONAL]))
        if by_status[Status.FAIL]:
            parts.append("failed: " + ", ".join(c.name for c in by_status[Status.FAIL]))
        return "; ".join(parts)

    def properties(self) -> dict[str, str]:
        """JUnit properties: check.<name> = `status: message`, check.<name>.execution when it has one,
        and checks.ran."""
        props = {f"check.{c.name}": f"{c.status.value}: {c.message}" for c in self.checks}
        props.update({f"check.{c.name}.execution": c.execution for c in self.checks if c.execution})
        props["checks.ran"] = ",".join(c.name for c in self.checks)
        return props

    def lines(self) -> list[str]:
        """One line per check, as printed by `python -m harness.verdict` and the test's log."""
        return [f"{c.status.value.upper():<14} {c.name}: {c.message}" for c in self.checks]

    def raise_if_failed(self) -> None:
        """TestFailure (ThresholdMissed for a threshold) with the first failing check's message;
        the others follow on the next lines."""
        failures = self.failures
        if not failures:
            return
        first = failures[0]
        others = "".join(f"\nalso failed: {c.name}: {c.message}" for c in failures[1:])
        raise (ThresholdMissed if first.threshold else TestFailure)(first.message + others)


def beyond_upstream(checks: Iterable[Check], test: str, strict: bool, *, judges: str = "does not judge this",
                    switch: str = "JUDGE_STRICT=true or --judgeStrict makes it decide") -> list[Check]:
    """Checks this project makes beyond the pass criterion of upstream's `test` (`TestX` or
    `TestX/<feature>`): as they are with `strict` (the setting `switch` names: JUDGE_STRICT, or
    JUDGE_BANDWIDTH for the bandwidth), else informational: "upstream's TestX <judges> (<switch>)"."""
    checks = list(checks)
    if strict:
        return checks
    why = f"upstream's {test.split('/', maxsplit=1)[0]} {judges} ({switch})"
    return [c.informational(why) for c in checks]
