"""The context a test runs in (Go's *testing.T, with setup/teardown built in) and what a run shares.

A test is a function of a TestContext; its body is the assessment. Everything it sets up
registers its own teardown on the context (`t.cleanup`), which runs in reverse order on every
path (pass, fail, timeout, interrupt), logs each error and continues.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.artifacts import folder_of_test
from harness.cancel import CancelToken
from harness.config import Config, Origin, Resolved, Source
from harness.errors import HarnessError, SkipTest, TestFailure
from harness.junit import CaseResult, Outcome
from harness.results import CANNED, MIXED, TestRecord, result_document, utc_now, write_result
from harness.suite import Selector, TestFunc

if TYPE_CHECKING:
    from harness.cluster import Cluster
    from harness.topology import Topology


class Output:
    """Go-test-style console output; without -v a test's log lines are shown only if it fails."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose

    def emit(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


@dataclass
class Session:
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

    def __init__(self, session: Session, name: str, depth: int = 0) -> None:
        self.session = session
        self.name = name
        self.depth = depth
        self.result = CaseResult(name)
        # What result.json holds beyond the outcome: pods, events, checks, metrics (harness/results.py).
        self.record = TestRecord()
        self._cleanups = ExitStack()
        self._log_lines: list[str] = []
        # Parts of <system-out>, joined once when the test ends (appending to one string copied
        # it whole on each pod's log: quadratic in the pods).
        self._output_parts: list[str] = []
        self._artifacts_dir: Path | None = None
        self.namespace_name: str | None = None

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
    def artifacts_dir(self) -> Path:
        """$ARTIFACTS/<binary>/<TestX>/ (subtests: <TestX>/<sub>; harness.artifacts.folder_of_test's rule)."""
        if self._artifacts_dir is None:
            self._artifacts_dir = self.session.artifacts / self.session.binary / folder_of_test(self.name)
            self._artifacts_dir.mkdir(parents=True, exist_ok=True)
        return self._artifacts_dir

    def logf(self, message: str, *args: Any) -> None:
        text = message % args if args else message
        indent = "    " * (self.depth + 1)
        for line in text.splitlines() or [""]:
            self._log_lines.append(indent + line)
            if self.session.output.verbose:
                self.session.output.emit(indent + line)

    def property(self, key: str, value: object) -> None:
        """A JUnit property of this test case (metrics, restart counts...)."""
        self.result.properties[key] = str(value)

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
        full = f"{self.name}/{subtest}"
        if not self.session.selector.matches(full):
            return True
        child = TestContext(self.session, full, self.depth + 1)
        child.execute(func)
        self.record.child_executions.add(child.record.execution())
        if child.result.outcome in (Outcome.FAIL, Outcome.ERROR):
            if self.result.outcome is Outcome.PASS:
                self.result.outcome = Outcome.FAIL
                self.result.message = f"subtest {full} failed: {child.result.message}"
            return False
        return True

    # -- what the runner uses --------------------------------------------------------------------

    def execute(self, func: TestFunc) -> CaseResult:
        """Run func and its cleanups; record the outcome, print Go-style lines."""
        out = self.session.output
        out.emit(f"{'    ' * self.depth}=== RUN   {self.name}")
        started = time.monotonic()
        self.session.results.append(self.result)
        try:
            with self._cleanups:
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
        except Exception as exc:
            self._record(Outcome.ERROR, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        finally:
            self.result.elapsed = time.monotonic() - started
            self.result.system_out = "".join(self._output_parts)
            self.result.properties["execution"] = self.record.execution()
            self.write_result()
            self._report()
        return self.result

    def write_result(self) -> None:
        """result.json in the test's folder; a failure to write it is logged, never raised (JUnit is
        still written)."""
        try:
            document = result_document(self.session.binary, self.result, self.record, self.session.resolved())
            write_result(self.artifacts_dir / "result.json", document)
        except (OSError, ValueError) as exc:
            self.logf("cannot write result.json: %s: %s", type(exc).__name__, exc)

    def _record(self, outcome: Outcome, message: str, detail: str = "") -> None:
        if self.result.outcome in (Outcome.FAIL, Outcome.ERROR) and outcome is not Outcome.SKIP:
            # Keep the first failure (a subtest's), add this one to the detail.
            self.result.detail += f"\n{message}\n{detail}"
            return
        if outcome in (Outcome.FAIL, Outcome.ERROR):
            self.record.failed_at = utc_now()
        self.result.outcome, self.result.message = outcome, message.splitlines()[0] if message else ""
        self.result.detail = f"{message}\n{detail}".strip()
        self.logf("%s", message)

    def _report(self) -> None:
        out, indent = self.session.output, "    " * self.depth
        verdict = self.result.outcome.value if self.result.outcome is not Outcome.ERROR else "FAIL"
        out.emit(f"{indent}--- {verdict}: {self.name} ({self.result.elapsed:.2f}s)")
        execution = self.result.properties.get("execution")
        if execution in (CANNED, MIXED):
            out.emit(f"{indent}    execution={execution}: the local cluster served canned pod logs, not a real run")
        if not out.verbose and self.result.outcome in (Outcome.FAIL, Outcome.ERROR):
            for line in self._log_lines:
                out.emit(line)
