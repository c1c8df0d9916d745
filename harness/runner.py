"""The Go-test-compatible runner: parse, resolve, check ARTIFACTS, discover, run tests, write JUnit,
exit 0/1/2.

JUnit is written on every exit path: success, test failure, usage or configuration error,
-test.timeout, SIGTERM/SIGINT (kubetest2 forwards them); a JUnit that cannot be written fails
the run. The first signal cancels the run: the running test stops waiting, captures logs and
cleans up; a second one cuts cleanup short.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from harness import __version__
from harness.artifacts import add_metadata, ensure_writable
from harness.cancel import CancelToken
from harness.cli import parse_args, wants_help
from harness.config import Config, Resolved, fallback_artifacts, properties, report_lines, resolve
from harness.errors import ClusterError, ConfigError, HarnessError, UsageError
from harness.junit import CaseResult, Outcome, write_junit
from harness.parsers import format_duration
from harness.suite import Selector, Suite, TestCase, listed
from harness.testing import Output, Session, TestContext

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
METADATA = {"tester-version": f"kubetest2-training {__version__}", "kubetest2-training-version": __version__}


def main(suite: Suite, argv: Sequence[str] | None = None) -> int:
    """Run a suite's command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # Answered before anything else is imported or resolved: kubetest2 probes `--help` each run.
    if wants_help(args):
        sys.stdout.write(suite.usage())
        return EXIT_PASS
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = resolve(parse_args(args))
    except (UsageError, ConfigError) as exc:
        return setup_error(suite, fallback_artifacts(), exc)
    if cfg.test_list is not None:
        for name in listed(suite, cfg.test_list):
            print(name)
        return EXIT_PASS
    artifacts = Path(cfg.artifacts)
    try:
        ensure_writable(artifacts, cfg.origin("artifacts"))  # before the cluster is contacted
    except ConfigError as exc:
        return setup_error(suite, artifacts, exc)
    return Runner(suite, cfg).run()


def write_results(suite: Suite, artifacts: Path, results: list[CaseResult], props: dict[str, str]) -> bool:
    """JUnit and metadata.json; False (said on stderr) when they cannot be written."""
    try:
        write_junit(suite.junit_path(artifacts), suite.binary, results, props)
        add_metadata(artifacts, METADATA)
    except OSError as exc:
        print(f"{suite.binary}: cannot write JUnit to {artifacts}: {exc}", file=sys.stderr)
        return False
    return True


def setup_error(suite: Suite, artifacts: Path, exc: HarnessError) -> int:
    """A usage/configuration error: message on stderr, JUnit with the error, exit 2."""
    kind = "usage" if isinstance(exc, UsageError) else "configuration"
    print(f"{suite.binary}: {kind} error: {exc}", file=sys.stderr)
    if isinstance(exc, UsageError):
        print(f"Run '{suite.binary} --help' for usage.", file=sys.stderr)
    result = CaseResult("Configuration", Outcome.ERROR, 0.0, f"{kind} error: {exc}", str(exc))
    write_results(suite, artifacts, [result], {"tester-version": __version__})
    print("FAIL")
    return EXIT_USAGE


class Runner:
    """One run of a suite with a resolved configuration."""

    def __init__(self, suite: Suite, cfg: Config) -> None:
        self.suite = suite
        self.cfg = cfg
        self.cancel = CancelToken()
        self.session = Session(suite.binary, cfg, Path(cfg.artifacts), self.cancel, Output(cfg.test_v),
                               Selector.from_config(cfg))
        self._signals = 0

    def run(self) -> int:
        selected = self.session.selector.select(self.suite)
        self._install_signal_handlers()
        if any(t.needs_cluster for t in selected):
            try:
                self._connect_and_discover()
            except (ConfigError, ClusterError) as exc:
                return setup_error(self.suite, self.session.artifacts, exc)
        if not selected:
            print("testing: warning: no tests to run")
        self._print_config()
        try:
            self._run_tests(selected)
        finally:
            written = write_results(self.suite, self.session.artifacts, self.session.results, self._properties())
        # A cancelled run (signal, timeout, failfast) never passes, even between tests; nor does
        # one whose results were lost.
        failed = self._failed() or self.cancel.is_set() or not written
        print("FAIL" if failed else "PASS")
        return EXIT_FAIL if failed else EXIT_PASS

    # -- steps -----------------------------------------------------------------------------------

    def _connect_and_discover(self) -> None:
        from harness.cluster import CONNECT_RETRY_SECONDS, RETRY_BUDGET_SECONDS, Cluster  # the kubernetes
        from harness.discovery import discover  # client loads only when needed
        from harness.launchers import LAUNCHERS
        from harness.training_job import require_launcher

        cluster = Cluster.connect(self.cfg.kubeconfig, cancelled=self.cancel, retry_budget=CONNECT_RETRY_SECONDS)
        self.session.server_version = cluster.server_version()
        cluster.retry_budget = RETRY_BUDGET_SECONDS  # from now on, ride out API server restarts
        self.session.cluster = cluster
        self.session.topology = discover(cluster, self.cfg, self.cancel)
        require_launcher(cluster, LAUNCHERS[self.cfg.launcher], f"LAUNCHER={self.cfg.launcher}",
                         "use LAUNCHER=torchrun")

    def _run_tests(self, selected: list[TestCase]) -> None:
        timer = self._start_timeout()
        try:
            for test in selected:
                if self.cancel.is_set():
                    self._not_run(test, f"not run: {self.cancel.reason}")
                    continue
                TestContext(self.session, test.name).execute(test.func)
                if self.cfg.test_failfast and self._failed():
                    self.cancel.cancel("-test.failfast: an earlier test failed")
        except KeyboardInterrupt:
            pass  # second signal: the results so far are written
        finally:
            if timer is not None:
                timer.cancel()

    def _resolved(self) -> dict[str, Resolved]:
        return self.session.resolved()

    def _properties(self) -> dict[str, str]:
        props = {"tester-version": __version__, **properties(self._resolved())}
        if self.session.cluster is not None:
            props["api-requests"] = str(self.session.cluster.request_count)
        return props

    def _print_config(self) -> None:
        if not self.cfg.test_v:
            return
        print(f"{self.suite.binary} {__version__}: resolved configuration")
        for line in report_lines(self._resolved()):
            print(f"  {line}")
        if self.session.topology is not None:
            print("  nodes: " + ", ".join(self.session.topology.node_names))
        sys.stdout.flush()

    def _not_run(self, test: TestCase, reason: str) -> None:
        context = TestContext(self.session, test.name)
        context.result = CaseResult(test.name, Outcome.SKIP, 0.0, reason)
        self.session.results.append(context.result)
        context.write_result()
        print(f"--- SKIP: {test.name} (0.00s)\n    {reason}")

    def _failed(self) -> bool:
        return any(r.outcome in (Outcome.FAIL, Outcome.ERROR) for r in self.session.results)

    # -- cancellation ----------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # the tester plugin may run suites from a worker thread in tests
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            print(f"\n{self.suite.binary}: received {name}: stopping; capturing logs and cleaning up "
                  "(send again to skip cleanup)", file=sys.stderr, flush=True)
            self.cancel.cancel(f"INTERRUPTED: received {name}")
        else:
            raise KeyboardInterrupt

    def _start_timeout(self) -> threading.Timer | None:
        if not self.cfg.test_timeout:
            return None
        reason = f"TIMEOUT: -test.timeout {format_duration(self.cfg.test_timeout)} expired"

        def expire() -> None:
            print(f"\n{self.suite.binary}: {reason}: stopping running tests", file=sys.stderr, flush=True)
            self.cancel.cancel(reason)

        timer = threading.Timer(self.cfg.test_timeout, expire)
        timer.daemon = True
        timer.start()
        return timer
