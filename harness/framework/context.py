"""The context a test runs in (Go's *testing.T, with setup/teardown built in), what a run shares,
and the Go-style console output (`go test -v`, and the framing `go tool test2json` reads).

A test is a function of a TestContext; its body is the assessment. Everything it sets up
registers its own teardown on the context (`t.cleanup`), which runs in reverse order on every
path (pass, fail, timeout, interrupt), logs each error and continues; by then the test's outcome
is recorded, so a teardown can keep what a failed test leaves for debugging.
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cluster.cancel import CancelToken
from harness.config.artifacts import folder_of_test
from harness.config.settings import Config, Origin, Resolved, Source, Verbosity
from harness.errors import HarnessError, SkipTest, TestFailure
from harness.framework.suite import Feature, Selector, TestFunc
from harness.report.junit import CaseResult, Outcome
from harness.report.results import CANNED, MIXED, TestRecord, result_document, utc_now, write_result

if TYPE_CHECKING:
    from harness.cluster.client import Cluster
    from harness.config.topology import Topology

# test2json's marker: Go's testing package starts its framing lines with ^V under -test.v=test2json.
TEST2JSON_MARKER = "\x16"
EXIT0_PANIC = "panic: unexpected call to os.Exit(0) during test"


def go_subtest_name(name: str) -> str:
    """A subtest's name as Go's t.Run makes it: white space becomes `_` ("MPIJob succeeds")."""
    return re.sub(r"\s", "_", name)


class TestPanic(Exception):
    """The run must end like a Go panic: JUnit written, the message printed, exit 2."""

    __test__ = False


class Output:
    """Go-test-style console output. Quiet: `--- FAIL` lines and a failed test's log lines only.
    Verbose: `=== RUN`, logs, `--- PASS` as they happen. test2json: verbose, with Go's framing
    (^V before each framing line, `--- X` unindented, `=== NAME  <parent>` after each test)."""

    def __init__(self, verbosity: Verbosity) -> None:
        self.verbose = verbosity is not Verbosity.QUIET
        self.test2json = verbosity is Verbosity.TEST2JSON

    def emit(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def frame(self, line: str) -> None:
        """A framing line (=== RUN, --- PASS, PASS/FAIL): marked for test2json when asked."""
        self.emit((TEST2JSON_MARKER if self.test2json else "") + line)

    def started(self, name: str, depth: int) -> None:
        if self.verbose:
            self.frame(f"{'' if self.test2json else '    ' * depth}=== RUN   {name}")

    def ended(self, verdict: str, name: str, elapsed: float, depth: int) -> None:
        indent = "" if self.test2json else "    " * depth
        self.frame(f"{indent}--- {verdict}: {name} ({elapsed:.2f}s)")
        if self.test2json:  # so test2json gives what follows to the parent (Go does the same)
            self.frame(f"=== NAME  {name.rpartition('/')[0]}")

    def summary(self, passed: bool) -> None:
        self.frame("PASS" if passed else "FAIL")


@dataclass
class RunContext:
    """What every test of one run shares."""

    binary: str
    cfg: Config
    artifacts: Path
    cancel: CancelToken
    output: Output
    selector: Selector
    # Set once the runner has connected and discovered (only when a selected test needs the cluster).
    cluster: Cluster | None = None
    server_version: str | None = None
    topology: Topology | None = None
    results: list[CaseResult] = field(default_factory=list)
    # Teardown of what the run set up for all tests (device plugins, mpi-operator): after the last test.
    teardown: ExitStack = field(default_factory=ExitStack)
    # The tests running now, by name, with their start times (the -test.timeout panic lists them).
    running: dict[str, float] = field(default_factory=dict)
    # Facts about the run for the JUnit <testsuite> properties (add-ons installed, removed).
    properties: dict[str, str] = field(default_factory=dict)
    # Upstream's binary name this run was called by (nvidia.test), else "": images then follow
    # upstream's rules (harness/jobs/images.py).
    invoked_as: str = ""

    def resolved(self) -> dict[str, Resolved]:
        """The configuration with what discovery found in place of what was left to it."""
        shown = self.cfg.resolved()
        if self.topology is not None:
            shown.update(self.topology.resolved())
        if self.server_version is not None:
            shown["server_version"] = Resolved(self.server_version, Origin(Source.DISCOVERED, "/version"))
        return shown


class TestContext:
    """The `t` a test function receives."""

    __test__ = False

    def __init__(self, session: RunContext, name: str, depth: int = 0, instance: str = "") -> None:
        self.session = session
        self.name = name
        # Unique among the run's tests (-test.count repeats a name): artifacts folder and namespace.
        self.instance = instance or name
        self.depth = depth
        self.junit_case = CaseResult(name)
        # What result.json holds beyond the outcome: pods, events, checks, metrics (harness/report/results.py).
        self.result_json = TestRecord()
        self._cleanups = ExitStack()
        self._log_lines: list[str] = []
        # Parts of <system-out>, joined once when the test ends (appending to one string copied
        # it whole on each pod's log: quadratic in the pods).
        self._output_parts: list[str] = []
        self._artifacts_dir: Path | None = None
        self.namespace_name: str | None = None
        # The feature this context runs (its subtests' too): what `assessment` selects against.
        self.feature: Feature | None = None

    # -- what tests use --------------------------------------------------------------------------

    @property
    def cfg(self) -> Config:
        return self.session.cfg

    @property
    def cluster(self) -> Cluster:
        if self.session.cluster is None:
            raise HarnessError(f"{self.name}: no cluster connection (the runner did not connect)")
        return self.session.cluster

    @property
    def topology(self) -> Topology:
        """What discovery found: node type, the nodes to use, GPUs and EFA per node."""
        if self.session.topology is None:
            raise HarnessError(f"{self.name}: no topology (the runner did not discover the nodes)")
        return self.session.topology

    @property
    def cancel(self) -> CancelToken:
        return self.session.cancel

    @property
    def failed(self) -> bool:
        return self.junit_case.outcome in (Outcome.FAIL, Outcome.ERROR)

    def keeps_resources(self) -> bool:
        """Whether teardown leaves the test's objects: KEEP_RESOURCES, --disable-graceful-teardown,
        or --fail-fast on a failed test (e2e-framework skips a failed feature's teardown)."""
        cfg = self.cfg
        return cfg.keep_resources or cfg.disable_graceful_teardown or (cfg.fail_fast and self.failed)

    @property
    def artifacts_dir(self) -> Path:
        """$ARTIFACTS/<binary>/<TestX>/ (subtests: <TestX>/<sub>; a repeated test: <TestX>_01), by
        harness.config.artifacts.folder_of_test's rule."""
        if self._artifacts_dir is None:
            self._artifacts_dir = self.session.artifacts / self.session.binary / folder_of_test(self.instance)
            self._artifacts_dir.mkdir(parents=True, exist_ok=True)
        return self._artifacts_dir

    def logf(self, message: str, *args: Any) -> None:
        text = message % args if args else message
        indent = "    " * (self.depth + 1)
        for line in text.splitlines() or [""]:
            self._log_lines.append(indent + line)
            if self.session.output.verbose:
                self.session.output.emit(indent + line)

    def print_verbose(self, text: str) -> None:
        """Text for the console under -test.v only (pod logs under upstream's headings), as is."""
        if self.session.output.verbose:
            self.session.output.emit(text.rstrip("\n"))

    def property(self, key: str, value: object) -> None:
        """A JUnit property of this test case (metrics, restart counts...)."""
        self.junit_case.properties[key] = str(value)

    def attach_output(self, text: str) -> None:
        """Text for the test case's <system-out> (pod logs under their headers)."""
        self._output_parts.append(text if text.endswith("\n") else text + "\n")

    def cleanup(self, func: Callable[[], None], description: str) -> None:
        """Register teardown; runs in reverse order on every exit path, errors logged not raised."""

        def guarded() -> None:
            try:
                func()
            except BaseException as exc:
                self.logf("cleanup %s failed: %s: %s", description, type(exc).__name__, exc)
                if isinstance(exc, KeyboardInterrupt):
                    raise

        self._cleanups.callback(guarded)

    def skip(self, reason: str) -> None:
        raise SkipTest(reason)

    def run(self, subtest: str, func: TestFunc) -> bool:
        """Run a subtest (`TestX/subtest`) if selected; a failed subtest fails its parent."""
        full = f"{self.name}/{go_subtest_name(subtest)}"
        if not self.session.selector.matches(full):
            return True
        return self._run_child(full, func)

    def run_features(self, features: tuple[Feature, ...], in_place: bool) -> None:
        """A test's selected features: in place for a one-feature test, else each a subtest; with
        --fail-fast, no more features of this test after one failed (as e2e-framework)."""
        if in_place:
            self.feature = features[0]
            features[0].func(self)
            return
        for feature in features:
            if not self._run_child(f"{self.name}/{feature.name}", feature.func, feature) and self.cfg.fail_fast:
                self.logf("--fail-fast: %s failed; the test's other features are not run", feature.name)
                return

    def assessment(self, name: str, func: Callable[[], None]) -> None:
        """One of the feature's assessments (upstream's `.Assess(name, ...)`), `name` as the feature
        declares it (`{setting}` included): run here when --assess / --skip-assessment select it;
        else never run nor judged, and reported as e2e-framework reports it, a skipped subtest
        `<test>/<name>` whose log says why. What the body did before it (the setup: the Job
        launched) and its cleanups run either way, as upstream's Setup and Teardown do."""
        feature = self.feature
        if feature is None or name not in feature.assessments:
            declared = f"{feature.name}: {', '.join(feature.assessments) or 'none'}" if feature else "no feature"
            raise HarnessError(f"{self.name}: assessment {name!r} is not one its feature declares ({declared})")
        shown = feature.assessment_names(self.cfg)[feature.assessments.index(name)]
        reason = self.session.selector.assessment_skip(shown)
        if reason is None:
            func()
            return
        self._run_child(f"{self.name}/{go_subtest_name(shown)}", lambda sub: sub.skip(reason))

    def _run_child(self, full: str, func: TestFunc, feature: Feature | None = None) -> bool:
        suffix = self.instance[len(self.name):]
        child = TestContext(self.session, full, self.depth + 1, full + suffix)
        child.feature = feature or self.feature
        child.execute(func)
        self.result_json.child_executions.add(child.result_json.execution())
        if child.failed:
            if self.junit_case.outcome is Outcome.PASS:
                self.junit_case.outcome = Outcome.FAIL
                self.junit_case.message = f"subtest {full} failed: {child.junit_case.message}"
            return False
        return True

    # -- what the runner uses --------------------------------------------------------------------

    def execute(self, func: TestFunc) -> CaseResult:
        """Run func, record its outcome, then its cleanups; print Go-style lines."""
        self.session.output.started(self.name, self.depth)
        started = time.monotonic()
        self.session.results.append(self.junit_case)
        self.session.running[self.name] = started
        try:
            try:
                self._run_body(func)
            finally:
                self._cleanups.close()
        except KeyboardInterrupt:  # a second signal during the cleanups
            if not self.failed:
                self._record(Outcome.FAIL, f"INTERRUPTED: {self.cancel.reason or 'second interrupt'}; "
                             "cleanup cut short")
            raise
        finally:
            self.session.running.pop(self.name, None)
            self.junit_case.elapsed = time.monotonic() - started
            self.junit_case.system_out = "".join(self._output_parts)
            self.junit_case.properties["execution"] = self.result_json.execution()
            self.write_result()
            self._report()
        return self.junit_case

    def _run_body(self, func: TestFunc) -> None:
        """Run the test body and record its outcome before the cleanups run: teardown reads it
        (objects.yaml is saved only for a test that did not pass)."""
        try:
            func(self)
        except SkipTest as exc:
            self._record(Outcome.SKIP, str(exc))
        except TestFailure as exc:
            self._record(Outcome.FAIL, str(exc))
        except HarnessError as exc:
            self._record(Outcome.ERROR, f"{type(exc).__name__}: {exc}")
        except AssertionError as exc:
            self._record(Outcome.FAIL, str(exc) or "assertion failed", traceback.format_exc())
        except KeyboardInterrupt:
            self._record(Outcome.FAIL, f"INTERRUPTED: {self.cancel.reason or 'second interrupt'}; "
                         "cleanup cut short")
            raise
        except SystemExit as exc:
            self._on_exit(exc)
        except TestPanic:
            raise
        except Exception as exc:
            self._record(Outcome.ERROR, f"{type(exc).__name__}: {exc}", traceback.format_exc())

    def _on_exit(self, exc: SystemExit) -> None:
        """A test that ends the process: with status 0 under -test.paniconexit0 it fails and the run
        panics (go test passes that flag); otherwise the exit goes on, as in Go."""
        if exc.code in (0, None) and self.cfg.test_paniconexit0:
            self._record(Outcome.FAIL, EXIT0_PANIC)
            raise TestPanic(EXIT0_PANIC) from None
        self._record(Outcome.FAIL, f"the test exited the process with status {exc.code}")
        raise exc

    def write_result(self) -> None:
        """result.json in the test's folder; a failure to write it is logged, never raised (JUnit is
        still written)."""
        try:
            document = result_document(self.session.binary, self.junit_case, self.result_json, self.session.resolved())
            write_result(self.artifacts_dir / "result.json", document)
        except (OSError, ValueError) as exc:
            self.logf("cannot write result.json: %s: %s", type(exc).__name__, exc)

    def _record(self, outcome: Outcome, message: str, detail: str = "") -> None:
        if self.failed and outcome is not Outcome.SKIP:
            # Keep the first failure (a subtest's), add this one to the detail.
            self.junit_case.detail += f"\n{message}\n{detail}"
            return
        if outcome in (Outcome.FAIL, Outcome.ERROR):
            self.result_json.failed_at = utc_now()
        self.junit_case.outcome, self.junit_case.message = outcome, message.splitlines()[0] if message else ""
        self.junit_case.detail = f"{message}\n{detail}".strip()
        self.logf("%s", message)

    def _report(self) -> None:
        out = self.session.output
        verdict = self.junit_case.outcome.value if self.junit_case.outcome is not Outcome.ERROR else "FAIL"
        execution = self.junit_case.properties.get("execution")
        canned = (f"execution={execution}: the local cluster served canned pod logs, not a real run"
                  if execution in (CANNED, MIXED) else None)
        if canned and out.verbose:
            self.logf("%s", canned)  # a log line of the test, before its --- line (test2json too)
        out.ended(verdict, self.name, self.junit_case.elapsed, self.depth)
        if canned and not out.verbose:
            out.emit("    " * (self.depth + 1) + canned)
        if not out.verbose and self.failed:
            for line in self._log_lines:
                out.emit(line)
