"""What a test binary declares (its test cases) and which of them a run selects (-test.run, features)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli import usage
from harness.config import Config

if TYPE_CHECKING:
    from harness.testing import TestContext

TestFunc = Callable[["TestContext"], None]


@dataclass(frozen=True)
class TestCase:
    """A registered test: its Go-style name and its function (subtests are declared by `t.run`)."""

    name: str
    func: TestFunc
    # False for a test that never touches the cluster: the runner then neither connects nor discovers.
    needs_cluster: bool = True
    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class Suite:
    """A test binary: its name (also the JUnit file's), a summary and its test cases, registered
    in order with the `@SUITE.test("TestX")` decorator."""

    binary: str
    summary: str
    tests: list[TestCase] = field(default_factory=list)

    def test(self, name: str, *, needs_cluster: bool = True) -> Callable[[TestFunc], TestFunc]:
        """Register a test function under its Go-style name (a decorator)."""

        def register(func: TestFunc) -> TestFunc:
            if any(test.name == name for test in self.tests):
                raise ValueError(f"suite {self.binary}: two tests named {name}")
            self.tests.append(TestCase(name, func, needs_cluster))
            return func

        return register

    def usage(self) -> str:
        return usage(self.binary, self.summary, [t.name for t in self.tests])

    def junit_path(self, artifacts: Path) -> Path:
        return artifacts / f"junit_{self.binary}.xml"


def split_run_pattern(pattern: str) -> list[str]:
    """Split a -test.run pattern at top-level slashes, like Go (not inside [] or ())."""
    parts, depth, current = [], 0, []
    for ch in pattern:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth = max(0, depth - 1)
        if ch == "/" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


@dataclass(frozen=True)
class Selector:
    """Which tests and subtests run: -test.run levels, and e2e-framework's feature filters."""

    levels: tuple[re.Pattern[str], ...] = ()
    feature: re.Pattern[str] | None = None
    skip_features: re.Pattern[str] | None = None

    @classmethod
    def from_config(cls, cfg: Config) -> Selector:
        levels = tuple(re.compile(p) for p in split_run_pattern(cfg.test_run)) if cfg.test_run else ()
        return cls(levels,
                   re.compile(cfg.feature) if cfg.feature else None,
                   re.compile(cfg.skip_features) if cfg.skip_features else None)

    def matches(self, full_name: str) -> bool:
        """Whether a test or subtest (`TestX/sub`) is selected; levels past the pattern match all."""
        names = full_name.split("/")
        for name, pattern in zip(names, self.levels, strict=False):
            if not pattern.search(name):
                return False
        top = names[0]
        if self.feature and not self.feature.search(top):
            return False
        return not (self.skip_features and self.skip_features.search(top))

    def select(self, suite: Suite) -> list[TestCase]:
        return [test for test in suite.tests if self.matches(test.name)]


def listed(suite: Suite, pattern: str) -> list[str]:
    """-test.list: the names of the tests matching `pattern`."""
    compiled = re.compile(pattern)
    return [test.name for test in suite.tests if compiled.search(test.name)]
