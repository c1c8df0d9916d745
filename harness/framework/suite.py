"""What a test binary declares (its tests, their features and labels) and which of them a run
selects: Go's -test.run and -test.skip, e2e-framework's feature, label and assessment filters.

A test is made of features, as upstream's e2e-framework tests are (`features.New("multi-node:...")
.WithLabel("suite", "nvidia")`): a test with several features runs each as a subtest
`TestX/<feature>`; a test with one feature runs it in place, under the test's own name, and its
feature name and labels still select it (`--feature=bert-training`, `-test.run=TestBertTraining/bert`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.settings import Config
from harness.framework.cli import usage

if TYPE_CHECKING:
    from harness.verdict.checks import CheckKind

# `{dcgm_diag_level}` in an assessment's name: the setting's value.
SETTING_IN_NAME = re.compile(r"\{(\w+)\}")
# A test: called with its TestContext (harness.framework.context). Typed loosely because the context
# runs what the suite declares: naming it here would make suite and context import each other.
TestFunc = Callable[[Any], None]
Labels = Mapping[str, tuple[str, ...]]

# The labels the suites' features carry, as upstream's e2e-framework features do
# (`.WithLabel("suite", "nvidia").WithLabel("hardware", "gpu")`): what --labels and --skip-labels select on.
NVIDIA: Labels = {"suite": ("nvidia",)}
GPU: Labels = {**NVIDIA, "hardware": ("gpu",)}
GPU_EFA: Labels = {**NVIDIA, "hardware": ("gpu", "efa")}


@dataclass(frozen=True)
class Feature:
    """A named, labelled part of a test, with the names of the assessments it makes (for --assess)."""

    name: str
    func: TestFunc
    labels: Labels = field(default_factory=dict)
    # As upstream writes them; `{setting}` stands for a setting's value where upstream's name carries
    # it (TestDcgmDiagnostics' "DCGM level-{dcgm_diag_level} diagnostic passes").
    # `func` runs each through `t.assessment(name, ...)`, as upstream's features are steps (setup,
    # each Assess a subtest, teardown): --assess / --skip-assessment skip assessments, never the feature.
    assessments: tuple[str, ...] = ()

    def assessment_names(self, cfg: Any = None) -> tuple[str, ...]:
        """The assessments' names with `cfg`'s values in them, or `<setting>` where there is none."""
        return tuple(SETTING_IN_NAME.sub(lambda m: f"<{m[1]}>" if cfg is None else str(getattr(cfg, m[1])), name)
                     for name in self.assessments)

    def describe(self) -> str:
        labels = ", ".join(f"{k}={'|'.join(v)}" for k, v in self.labels.items())
        return f"{self.name} [{labels}]" if labels else self.name


# The RBAC files a test needs (docs/RBAC.md): the run-only one always; the add-on rights as well for a
# test that itself installs in kube-system (GPU sharing replaces the NVIDIA device plugin). Set-up's
# device plugin installs need the add-on rights for the whole run, whichever tests it runs.
RUN_ONLY_RBAC = "manifests/rbac.yaml"
ADDON_RBAC = "manifests/rbac-addons.yaml"


@dataclass(frozen=True)
class TestCase:
    """A registered test: its Go-style name and its features, run in order."""

    name: str
    features: tuple[Feature, ...]
    # False for a test that never touches the cluster: the runner then neither connects nor discovers.
    needs_cluster: bool = True
    # One of upstream aws-k8s-tester's tests: the only ones its binary names run by default.
    upstream: bool = False
    # Earlier names that -test.run, -test.skip and -test.list still select it by (TestMPS for TestMps).
    aliases: tuple[str, ...] = ()
    # What the code cannot say of itself, declared with the test (docs/TESTS.md is generated from it,
    # testbins/catalogue.py): what it launches, the kinds of check that judge it, and the settings
    # that change it beyond those its checks name.
    launches: str = ""
    checks: tuple[CheckKind, ...] = ()
    settings: tuple[str, ...] = ()
    rbac: tuple[str, ...] = (RUN_ONLY_RBAC,)
    # A plain Go test (its cases t.Run subtests), not an e2e-framework feature: --feature,
    # --skip-features, --labels and --skip-labels select features only, so they leave it in.
    plain: bool = False
    __test__ = False  # not a pytest test class

    @property
    def in_place(self) -> bool:
        """One feature: it runs in the test's own context, no subtest level."""
        return len(self.features) == 1


def feature_name(test_name: str) -> str:
    """The default feature name of a one-feature test: TestNanoGPTTraining -> nano-gpt-training."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+", test_name.removeprefix("Test"))
    return "-".join(word.lower() for word in words)


@dataclass(frozen=True)
class Suite:
    """A test binary: its name (also the JUnit file's), a summary and its tests, registered in order
    with `@SUITE.test("TestX", ...)` (one feature) or `SUITE.features("TestX", [...])`."""

    binary: str
    summary: str
    tests: list[TestCase] = field(default_factory=list)
    # Other names the binary is installed under: upstream's (nvidia.test), which run upstream's tests
    # alone unless -test.run names one of ours (see as_invoked); the JUnit keeps `binary`.
    aliases: tuple[str, ...] = ()
    # The name this process was called by, when it is one of `aliases` (as_invoked sets it).
    invoked_as: str = ""
    # Its pods get GPUs through DRA ResourceClaims (nvidia-dra), not the nvidia.com/gpu resource: no
    # device plugin is installed for it (NVIDIA's DRA driver, with its GPU resources on, takes the
    # GPUs instead of the plugin) and discovery does not wait for nodes to advertise nvidia.com/gpu.
    devices_by_dra: bool = False

    def test(self, name: str, *, feature: str | None = None, labels: Labels | None = None,
             assessments: tuple[str, ...] = (), needs_cluster: bool = True, upstream: bool = False,
             launches: str = "", checks: tuple[CheckKind, ...] = (),
             settings: tuple[str, ...] = (), plain: bool = False) -> Callable[[TestFunc], TestFunc]:
        """Register a one-feature test function under its Go-style name (a decorator); `upstream`
        marks one of upstream aws-k8s-tester's tests; the rest as for `features`."""

        def register(func: TestFunc) -> TestFunc:
            self.features(name, [Feature(feature or feature_name(name), func, labels or {}, assessments)],
                          needs_cluster=needs_cluster, upstream=upstream, launches=launches, checks=checks,
                          settings=settings, plain=plain)
            return func

        return register

    def features(self, name: str, features: Sequence[Feature], *, needs_cluster: bool = True,
                 upstream: bool = False, aliases: tuple[str, ...] = (), launches: str = "",
                 checks: tuple[CheckKind, ...] = (), settings: tuple[str, ...] = (),
                 rbac: tuple[str, ...] = (RUN_ONLY_RBAC,), plain: bool = False) -> None:
        """Register a test made of several features, each run as the subtest `name/<feature>`, with
        what it launches (a phrase), the kinds of check that judge it (harness.verdict.checks.declare)
        and the settings (env names, or --flags) that change it besides its checks' own; `rbac` the
        RBAC files it needs (RUN_ONLY_RBAC, and ADDON_RBAC where it installs in kube-system itself)."""
        if any(test.name == name for test in self.tests):
            raise ValueError(f"suite {self.binary}: two tests named {name}")
        self.tests.append(TestCase(name, tuple(features), needs_cluster, upstream, aliases,
                                   " ".join(launches.split()), checks, settings, rbac, plain))

    def as_invoked(self, called: str, pattern: str | None) -> Suite:
        """The suite as the name it was called by offers it. Under upstream's names (`aliases`) an
        unchanged upstream CI line, with or without -test.run, must run what upstream's binary would:
        only upstream's tests, plus those of ours that `pattern` (-test.run or -test.list) names
        explicitly (see names_explicitly). Under our own name, every test."""
        if called not in self.aliases:
            return self
        kept = [test for test in self.tests if test.upstream
                or any(names_explicitly(pattern or "", name) for name in (test.name, *test.aliases))]
        return replace(self, tests=kept, invoked_as=called)

    @property
    def ours(self) -> list[str]:
        """This project's tests (not upstream's), by name."""
        return [test.name for test in self.tests if not test.upstream]

    def names(self) -> list[str]:
        """Every test, and the features of the tests that have several, as Go names them."""
        lines = []
        for test in self.tests:
            if test.in_place:
                lines.append(f"{test.name}  (feature {test.features[0].describe()})")
            else:
                lines += [test.name] + [f"{test.name}/{f.describe()}" for f in test.features]
        return lines

    def usage(self, full: Suite | None = None) -> str:
        """The usage text; `full` (the suite before as_invoked) names the tests this name leaves out."""
        if self.invoked_as:
            called = (f"{self.invoked_as} (upstream's name of {self.binary}: upstream's tests by default; "
                      f"this project's run only when -test.run names them)")
        else:
            called = self.binary + (f" (also installed as {', '.join(self.aliases)})" if self.aliases else "")
        names = self.names()
        if full is not None and full is not self:
            names += [f"{name}  (this project's: only when -test.run names it)" for name in full.ours
                      if name not in {test.name for test in self.tests}]
        return usage(called, self.summary, names)

    def junit_path(self, artifacts: Path) -> Path:
        return artifacts / f"junit_{self.binary}.xml"


# A test name no suite has. A -test.run level that matches it is a wildcard (`.*`, `Test`, `^Test`):
# upstream's CI may write one, meaning upstream's tests, so it does not name any of ours.
WILDCARD_PROBE = "TestZzNoSuchTestQq"


def names_explicitly(pattern: str, name: str) -> bool:
    """Whether a -test.run (or -test.list) pattern names the top-level test `name` itself: its first
    level matches `name` and is no wildcard (does not match WILDCARD_PROBE)."""
    if not pattern:
        return False
    first = re.compile(split_run_pattern(pattern)[0])
    return bool(first.search(name)) and not first.search(WILDCARD_PROBE)


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


def _levels(pattern: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in split_run_pattern(pattern)) if pattern else ()


def _optional(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern else None


def _has_any(labels: Labels, key: str, values: tuple[str, ...]) -> bool:
    return any(value in labels.get(key, ()) for value in values)


@dataclass(frozen=True)
class Selector:
    """Which tests, features and subtests run.

    Go's rules: -test.run levels each match (unanchored) the name's element at that level; levels
    past the name's depth match anything. -test.skip skips a name when every skip level matches and
    the name is at least that deep (`-test.skip=X/Y` skips Y under X, and X still runs).
    e2e-framework's rules apply to features: --feature / --skip-features on the feature's name,
    --labels (every key given must have one of its values among the feature's) / --skip-labels
    (any). --assess / --skip-assessment act on assessments, as e2e-framework's execFeature does: each
    assessment is a subtest, skipped ("name not matched", "name matched") when --assess does not
    match its name or --skip-assessment does (unanchored, Go's MatchString); the feature still
    runs its setup and teardown, even with no assessment left (see assessment_skip).
    """

    run: tuple[re.Pattern[str], ...] = ()
    skip: tuple[re.Pattern[str], ...] = ()
    feature: re.Pattern[str] | None = None
    skip_features: re.Pattern[str] | None = None
    labels: Labels = field(default_factory=dict)
    skip_labels: Labels = field(default_factory=dict)
    assess: re.Pattern[str] | None = None
    skip_assessment: re.Pattern[str] | None = None
    # What assessments' names carry (Feature.assessments); None: `<setting>`.
    cfg: Config | None = None

    @classmethod
    def from_config(cls, cfg: Config) -> Selector:
        return cls(_levels(cfg.test_run), _levels(cfg.test_skip), _optional(cfg.feature),
                   _optional(cfg.skip_features), cfg.labels, cfg.skip_labels, _optional(cfg.assess),
                   _optional(cfg.skip_assessment), cfg)

    def matches(self, full_name: str) -> bool:
        """Whether a test or subtest (`TestX/sub`) is selected by -test.run and -test.skip."""
        return self._runs(full_name) and not self._skips(full_name)

    def _runs(self, full_name: str) -> bool:
        names = full_name.split("/")
        return all(pattern.search(name) for name, pattern in zip(names, self.run, strict=False))

    def _skips(self, full_name: str) -> bool:
        names = full_name.split("/")
        return bool(self.skip) and len(names) >= len(self.skip) and all(
            pattern.search(name) for name, pattern in zip(names, self.skip, strict=False))

    def selects_feature(self, test: TestCase, feature: Feature) -> bool:
        """Go's rules on `TestX/<feature>` (under the test's name or an alias: selected by one, not
        skipped by any), then e2e-framework's on the feature itself."""
        names = (test.name, *test.aliases)
        if not any(self._runs(name) and self._runs(f"{name}/{feature.name}") for name in names):
            return False
        if any(self._skips(name) or self._skips(f"{name}/{feature.name}") for name in names):
            return False
        if test.plain:
            return True  # a plain Go test: e2e-framework's filters are not its
        if self.feature and not self.feature.search(feature.name):
            return False
        if self.skip_features and self.skip_features.search(feature.name):
            return False
        if not all(_has_any(feature.labels, key, values) for key, values in self.labels.items()):
            return False
        return not any(_has_any(feature.labels, key, values) for key, values in self.skip_labels.items())

    def assessment_skip(self, name: str) -> str | None:
        """Why --assess / --skip-assessment skip the assessment `name` (e2e-framework's
        requireProcessing messages, which its skipped subtest logs), or None when it runs."""
        if self.assess and not self.assess.search(name):
            return f'Skipping assessment "{name}": name not matched'
        if self.skip_assessment and self.skip_assessment.search(name):
            return f'Skipping assessment: "{name}": name matched'
        return None

    def select(self, suite: Suite) -> list[Selected]:
        """The tests with at least one selected feature, each with its selected features."""
        chosen = [Selected(test, tuple(f for f in test.features if self.selects_feature(test, f)))
                  for test in suite.tests]
        return [selected for selected in chosen if selected.features]


@dataclass(frozen=True)
class Selected:
    """A test and which of its features run."""

    test: TestCase
    features: tuple[Feature, ...]


def listed(suite: Suite, pattern: str) -> list[str]:
    """-test.list: the names of the tests matching `pattern` (top level only, like Go)."""
    compiled = re.compile(pattern)
    return [test.name for test in suite.tests if any(compiled.search(n) for n in (test.name, *test.aliases))]


def describe_selection(cfg: Config) -> str:
    """The flags that selected nothing, as given, for the no-match message."""
    given = [(flag, value) for flag, value in (
        ("-test.run", cfg.test_run), ("-test.skip", cfg.test_skip), ("--feature", cfg.feature),
        ("--skip-features", cfg.skip_features), ("--assess", cfg.assess),
        ("--skip-assessment", cfg.skip_assessment)) if value]
    given += [(flag, ",".join(f"{k}={v}" for k, vs in labels.items() for v in vs))
              for flag, labels in (("--labels", cfg.labels), ("--skip-labels", cfg.skip_labels)) if labels]
    return " ".join(f"{flag}={value!r}" for flag, value in given) or "the default selection"
