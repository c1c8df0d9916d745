"""The Go-test-compatible runner: parse, resolve, discover, run tests, write JUnit, exit 0/1/2.

JUnit is written on every exit path: success, test failure, usage or configuration error,
-test.timeout, SIGTERM/SIGINT (kubetest2 forwards them). The first signal cancels the run: the
running test stops waiting, captures logs and cleans up; a second one cuts cleanup short.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from harness import __version__
from harness.cancel import CancelToken
from harness.cli import parse_args, usage, wants_help
from harness.config import Config, Source, format_duration, resolve
from harness.errors import ClusterError, ConfigError, HarnessError, UsageError
from harness.junit import CaseResult, Outcome, add_metadata, write_junit
from harness.testing import Output, Selector, Session, TestCase, TestContext

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
METADATA = {"tester-version": f"kubetest2-training {__version__}", "kubetest2-training-version": __version__}


@dataclass(frozen=True)
class Suite:
    """A test binary: its name (also the JUnit file's), a summary and its test cases."""

    binary: str
    summary: str
    tests: tuple[TestCase, ...]

    def usage(self) -> str:
        return usage(self.binary, self.summary, [t.name for t in self.tests])

    def junit_path(self, artifacts: Path) -> Path:
        return artifacts / f"junit_{self.binary}.xml"


def _fallback_artifacts() -> Path:
    """Where to write JUnit when the configuration itself could not be resolved."""
    return Path(os.environ.get("ARTIFACTS") or "_artifacts").absolute()


def main(suite: Suite, argv: Sequence[str] | None = None) -> int:
    """Run a suite's command line; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # Answered before anything else is imported or resolved: kubetest2 probes `--help` each run.
    if wants_help(args):
        sys.stdout.write(suite.usage())
        return EXIT_PASS
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        command_line = parse_args(args)
        cfg = resolve(command_line.flag_values)
    except (UsageError, ConfigError) as exc:
        return _setup_error(suite, _fallback_artifacts(), exc)
    if cfg.test_list is not None:
        pattern = re.compile(cfg.test_list)
        for test in suite.tests:
            if pattern.search(test.name):
                print(test.name)
        return EXIT_PASS
    return Runner(suite, cfg).run()


def _setup_error(suite: Suite, artifacts: Path, exc: HarnessError) -> int:
    """A usage/configuration error: message on stderr, JUnit with the error, exit 2."""
    kind = "usage" if isinstance(exc, UsageError) else "configuration"
    print(f"{suite.binary}: {kind} error: {exc}", file=sys.stderr)
    if isinstance(exc, UsageError):
        print(f"Run '{suite.binary} --help' for usage.", file=sys.stderr)
    result = CaseResult("Configuration", Outcome.ERROR, 0.0, f"{kind} error: {exc}", str(exc))
    try:
        write_junit(suite.junit_path(artifacts), suite.binary, [result], {"tester-version": __version__})
        add_metadata(artifacts, METADATA)
    except OSError as write_error:
        print(f"{suite.binary}: cannot write JUnit to {artifacts}: {write_error}", file=sys.stderr)
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
        selected = [t for t in self.suite.tests if self.session.selector.matches(t.name)]
        self._install_signal_handlers()
        if any(t.needs_cluster for t in selected):
            try:
                self._connect_and_discover()
            except (ConfigError, ClusterError) as exc:
                return _setup_error(self.suite, self.session.artifacts, exc)
        if not selected:
            print("testing: warning: no tests to run")
        self._print_config()
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
            pass  # second signal: results so far are written below
        finally:
            if timer is not None:
                timer.cancel()
            self._write_junit()
        # A cancelled run (signal, timeout, failfast) never passes, even between tests.
        failed = self._failed() or self.cancel.is_set()
        print("FAIL" if failed else "PASS")
        return EXIT_FAIL if failed else EXIT_PASS

    # -- steps -----------------------------------------------------------------------------------

    def _connect_and_discover(self) -> None:
        from harness.cluster import Cluster  # the kubernetes client loads only when needed
        from harness.discovery import discover
        from harness.jobs import check_launcher

        cluster = Cluster.connect(self.cfg.kubeconfig, cancelled=self.cancel, retry_budget=5.0)
        try:
            version = cluster.request("GET", "/version", operation="contact the API server")
        except ClusterError as exc:
            host = cluster.api.configuration.host
            raise ClusterError(f"contact the API server at {host} "
                               f"(kubeconfig {self.cfg.kubeconfig or '~/.kube/config'}): {exc}") from None
        except Exception as exc:  # 401/403 and the like
            raise ClusterError(f"contact the API server: {exc}") from None
        cluster.retry_budget = 90.0  # from now on, ride out API server restarts
        self.session.cluster = cluster
        self.session.nodes = discover(cluster, self.cfg, self.cancel)
        check_launcher(cluster, self.cfg)
        self.cfg.set("server_version", version.get("gitVersion", "?"), Source.DISCOVERED, "/version")

    def _print_config(self) -> None:
        if not self.cfg.test_v:
            return
        print(f"{self.suite.binary} {__version__}: resolved configuration")
        for line in self.cfg.report_lines():
            print(f"  {line}")
        if self.session.nodes:
            print("  nodes: " + ", ".join(n.name for n in self.session.nodes))
        sys.stdout.flush()

    def _not_run(self, test: TestCase, reason: str) -> None:
        self.session.results.append(CaseResult(test.name, Outcome.SKIP, 0.0, reason))
        print(f"--- SKIP: {test.name} (0.00s)\n    {reason}")

    def _failed(self) -> bool:
        return any(r.outcome in (Outcome.FAIL, Outcome.ERROR) for r in self.session.results)

    def _write_junit(self) -> None:
        artifacts = self.session.artifacts
        properties = {"tester-version": __version__, **self.cfg.properties()}
        if self.session.cluster is not None:
            properties["api-requests"] = str(self.session.cluster.request_count)
        try:
            write_junit(self.suite.junit_path(artifacts), self.suite.binary, self.session.results,
                        properties)
            add_metadata(artifacts, METADATA)
        except OSError as exc:
            print(f"{self.suite.binary}: cannot write JUnit to {artifacts}: {exc}", file=sys.stderr)

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
