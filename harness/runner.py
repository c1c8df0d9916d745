"""The Go-test-compatible runner: parse, resolve, check ARTIFACTS, select, set up (connect, device
plugins, discover), run tests, remove what it installed, write JUnit, exit 0/1/2.

JUnit, then report.html from it, is written on every exit path: success, test failure, a
selection that matches nothing, usage or configuration error, -test.timeout (exit 2 with Go's panic
header, after logs and JUnit), SIGTERM/SIGINT; a JUnit that cannot be written fails the run. The
first signal cancels the run: the running test stops waiting, captures logs and cleans up; a
second one cuts cleanup short, except the same signal again within RELAYED_SIGNAL_SECONDS:
kubetest2's exec tester relays to the binary what a signal to the process group already
delivered, and that is one interrupt, not two.

The top of the harness: only the test binaries (testbins/) import it.
May import: harness.errors, harness.config, harness.metrics, harness.cluster, harness.verdict,
harness.report, harness.framework, harness.setup, harness.jobs.
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from harness import __version__
from harness.cluster.cancel import CancelToken
from harness.config.artifacts import add_metadata, ensure_writable
from harness.config.settings import Config, Resolved, fallback_artifacts, properties, report_lines, resolve
from harness.config.values import format_duration
from harness.errors import ClusterError, ConfigError, HarnessError, TestFailure, UsageError
from harness.framework.cli import parse_args, wants_help
from harness.framework.context import Output, RunContext, TestContext, TestPanic
from harness.framework.suite import Selected, Selector, Suite, describe_selection, listed
from harness.report.junit import CaseResult, Outcome, write_junit
from harness.verdict.baseline import load as load_baseline

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# Go exits 2 when a test binary panics (-test.timeout, os.Exit(0) under -test.paniconexit0).
EXIT_PANIC = 2
RELAYED_SIGNAL_SECONDS = 2.0
METADATA = {"tester-version": f"kubetest2-training {__version__}", "kubetest2-training-version": __version__}


def main(suite: Suite, argv: Sequence[str] | None = None, called: str | None = None) -> int:
    """Run a suite's command line; returns the exit code. `called`: the name the binary was called
    by (default: argv[0]'s): upstream's names (suite.aliases) run upstream's tests by default."""
    args = list(sys.argv[1:] if argv is None else argv)
    called = called if called is not None else (Path(sys.argv[0]).name if argv is None else suite.binary)
    # Answered before anything else is imported or resolved: kubetest2 probes `--help` each run.
    if wants_help(args):
        sys.stdout.write(suite.as_invoked(called, None).usage(suite))
        return EXIT_PASS
    try:
        cfg = resolve(parse_args(args))
        if cfg.fail_fast and cfg.parallel:
            raise UsageError("--fail-fast and --parallel are mutually exclusive options (as in e2e-framework)")
        if cfg.baseline is not None:  # a malformed baseline is a usage error before the cluster is touched
            load_baseline(cfg.baseline, cfg.baseline_tolerance)
    except (UsageError, ConfigError) as exc:
        return setup_error(suite, fallback_artifacts(), exc)
    configure_logging(cfg.klog_v)
    warn_about_ignored_flags(suite.binary, cfg)
    if cfg.test_list is not None:
        for name in listed(suite.as_invoked(called, cfg.test_list), cfg.test_list):
            print(name)
        return EXIT_PASS
    suite = suite.as_invoked(called, cfg.test_run)
    artifacts = Path(cfg.artifacts)
    try:
        ensure_writable(artifacts, cfg.origin("artifacts"))  # before the cluster is contacted
    except ConfigError as exc:
        return setup_error(suite, artifacts, exc)
    return Runner(suite, cfg).run()


def configure_logging(klog_level: int) -> None:
    """klog's -v as the harness's log level: 0 warnings, 1-3 info (API retries), 4 and up debug."""
    level = logging.WARNING if klog_level == 0 else logging.INFO if klog_level < 4 else logging.DEBUG
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)


def warn_about_ignored_flags(binary: str, cfg: Config) -> None:
    """A flag accepted for compatibility that has no effect here says so, with what it would have done."""
    for flag, would in cfg.ignored_flags:
        print(f"{binary}: warning: {flag} has no effect here (it would {would})", file=sys.stderr)
    if cfg.metric_dimensions:
        print(f"{binary}: warning: --metricDimensions: recorded as JUnit properties; upstream also installs "
              "the DCGM exporter and a CloudWatch agent to export GPU metrics, which this harness does not",
              file=sys.stderr)


def write_results(suite: Suite, artifacts: Path, results: list[CaseResult], props: dict[str, str]) -> bool:
    """JUnit and metadata.json; False (said on stderr) when they cannot be written."""
    try:
        write_junit(suite.junit_path(artifacts), suite.binary, results, props)
        add_metadata(artifacts, METADATA)
    except OSError as exc:
        print(f"{suite.binary}: cannot write JUnit to {artifacts}: {exc}", file=sys.stderr)
        return False
    write_run_report(suite.binary, artifacts)
    return True


def write_run_report(binary: str, artifacts: Path) -> None:
    """report.html from the artifacts just written (every binary of a run rewrites it with all of
    them). The page is a view of the JUnit and result.json: when it cannot be made, the run says so
    on stderr and its verdict stands."""
    # Imported here, not at the top: the page's code (HTML, SVG) costs --help and -test.list
    # about a third of their start-up, and they write no report.
    from harness.report.page import write_report

    try:
        path = write_report(artifacts)
    except Exception as exc:  # any failure of the view must leave the verdict intact
        print(f"{binary}: warning: report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    logging.getLogger(__name__).info("report: %s", path)


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


@dataclass(frozen=True)
class Planned:
    """One run of a test: which features, and its unique name (-test.count repeats: TestX#01)."""

    selected: Selected
    instance: str


def plan(selected: list[Selected], count: int, seed: int | None) -> list[Planned]:
    """The order tests run in: shuffled by `seed` (Go shuffles the top-level tests), then all of
    them `count` times."""
    order = list(selected)
    if seed is not None:
        random.Random(seed).shuffle(order)
    return [Planned(s, s.test.name if repetition == 0 else f"{s.test.name}#{repetition:02d}")
            for repetition in range(count) for s in order]


def shuffle_seed(value: str) -> int | None:
    """-test.shuffle: None for off, the clock for on (Go uses time.Now().UnixNano()), else the seed."""
    if value == "off":
        return None
    return time.time_ns() if value == "on" else int(value)


class Runner:
    """One run of a suite with a resolved configuration."""

    def __init__(self, suite: Suite, cfg: Config) -> None:
        self.suite = suite
        self.cfg = cfg
        self.cancel = CancelToken()
        self.session = RunContext(suite.binary, cfg, Path(cfg.artifacts), self.cancel, Output(cfg.test_v),
                               Selector.from_config(cfg), invoked_as=suite.invoked_as)
        self._signals: list[float] = []
        self._timed_out: str | None = None

    def run(self) -> int:
        seed = shuffle_seed(self.cfg.test_shuffle)
        if seed is not None:
            print(f"-test.shuffle {seed}")
        planned = plan(self.session.selector.select(self.suite), self.cfg.test_count, seed)
        if not planned:
            return self._no_tests()
        if self.cfg.dry_run:
            return self._dry_run(planned)
        self._install_signal_handlers()
        if any(p.selected.test.needs_cluster for p in planned):
            failed_setup = self._set_up_or_fail()
            if failed_setup is not None:
                return failed_setup
        panic = None
        try:
            self._print_config()
            self._run_tests(planned)
        except TestPanic as exc:
            panic = str(exc)
        finally:
            self._remove_what_was_installed()
            written = write_results(self.suite, self.session.artifacts, self.session.results, self._properties())
        return self._exit(written, panic)

    def _remove_what_was_installed(self) -> None:
        """The add-ons this run installed, removed after the last test; a second signal cuts it short."""
        try:
            self.session.teardown.close()
        except KeyboardInterrupt:
            print(f"{self.suite.binary}: removal of what this run installed cut short by a second signal "
                  "(python -m harness.cleanup removes it)", file=sys.stderr, flush=True)

    def _set_up_or_fail(self) -> int | None:
        """Set up; on failure remove what was installed, write JUnit and return the exit code:
        2 for a configuration the cluster cannot serve, 1 for an add-on that did not come up."""
        try:
            self._set_up()
        except (ConfigError, ClusterError) as exc:
            self._remove_what_was_installed()
            return setup_error(self.suite, self.session.artifacts, exc)
        except (HarnessError, TestFailure, KeyboardInterrupt) as exc:
            reason = str(exc) or "INTERRUPTED: a second signal"
            print(f"{self.suite.binary}: set-up failed: {reason}", file=sys.stderr)
            self.session.results.append(CaseResult("Setup", Outcome.ERROR, 0.0,
                                                   f"set-up failed: {reason}".splitlines()[0], reason))
            if not isinstance(exc, KeyboardInterrupt):
                self._remove_what_was_installed()
            written = write_results(self.suite, self.session.artifacts, self.session.results, self._properties())
            return self._exit(written, None)
        return None

    # -- steps -----------------------------------------------------------------------------------

    def _set_up(self) -> None:
        """Connect, pick the nodes, roll out the device plugins there, then discover their GPUs."""
        from harness.cluster.client import CONNECT_RETRY_SECONDS, RETRY_BUDGET_SECONDS, Cluster
        from harness.setup.addons import set_up_device_plugins  # the kubernetes client loads only when needed
        from harness.setup.discovery import discover, list_nodes, select_nodes

        cluster = Cluster.connect(self.cfg.kubeconfig, cancelled=self.cancel, retry_budget=CONNECT_RETRY_SECONDS,
                                  context=self.cfg.kube_context)
        self.session.server_version = cluster.server_version()
        cluster.retry_budget = RETRY_BUDGET_SECONDS  # from now on, ride out API server restarts
        self.session.cluster = cluster
        selection = select_nodes(list_nodes(cluster), self.cfg)
        if not self.suite.devices_by_dra:  # a DRA suite's GPUs are its driver's (Suite.devices_by_dra)
            set_up_device_plugins(self.session, tuple(n.name for n in selection.ready[: selection.count]))
        self.session.topology = discover(cluster, self.cfg, self.cancel, advertised=not self.suite.devices_by_dra)

    def _run_tests(self, planned: list[Planned]) -> None:
        timer = self._start_timeout()
        try:
            for entry in planned:
                test = entry.selected.test
                if self.cancel.is_set():
                    self._not_run(test.name, f"not run: {self.cancel.reason}")
                    continue
                context = TestContext(self.session, test.name, instance=entry.instance)
                context.execute(lambda t, e=entry: t.run_features(e.selected.features, e.selected.test.in_place))
                if self.cfg.test_failfast and self._failed():
                    self.cancel.cancel("-test.failfast: an earlier test failed")
        except KeyboardInterrupt:
            pass  # second signal: the results so far are written
        finally:
            if timer is not None:
                timer.cancel()

    def _no_tests(self) -> int:
        """Nothing selected: go test passes (exit 0); here that fails unless ALLOW_NO_TESTS says so."""
        print("testing: warning: no tests to run")
        if self.cfg.allow_no_tests:
            written = write_results(self.suite, self.session.artifacts, [], self._properties())
            return self._exit(written, None)
        message = (f"no test or feature matches {describe_selection(self.cfg)}; tests and features:\n  "
                   + "\n  ".join(self.suite.names()))
        print(f"{self.suite.binary}: {message}\n(ALLOW_NO_TESTS=true or --allowNoTests passes an empty selection, "
              "as go test does)", file=sys.stderr)
        result = CaseResult("Selection", Outcome.FAIL, 0.0,
                            f"no test or feature matches {describe_selection(self.cfg)}", message)
        write_results(self.suite, self.session.artifacts, [result], self._properties())
        self.session.output.summary(passed=False)
        return EXIT_FAIL

    def _dry_run(self, planned: list[Planned]) -> int:
        """--dry-run: what would run, nothing created; JUnit with each feature skipped."""
        print("--dry-run: these would run (nothing is created in the cluster, no test runs):")
        for entry in planned:
            test = entry.selected.test
            for feature in entry.selected.features:
                name = test.name if test.in_place else f"{test.name}/{feature.name}"
                names = feature.assessment_names(self.session.cfg)
                assessed = f"; assessments: {', '.join(names)}" if names else ""
                print(f"  {name}  (feature {feature.describe()}{assessed})")
                self.session.results.append(CaseResult(name, Outcome.SKIP, 0.0, "--dry-run: not run"))
        written = write_results(self.suite, self.session.artifacts, self.session.results, self._properties())
        return self._exit(written, None)

    def _exit(self, written: bool, panic: str | None) -> int:
        """PASS/FAIL and the exit code; a panic (timeout, os.Exit(0)) prints Go's message and exits 2."""
        if panic is not None or self._timed_out is not None:
            sys.stdout.flush()
            print(panic or self._timed_out, file=sys.stderr, flush=True)
            return EXIT_PANIC
        # A cancelled run (signal, timeout, failfast) never passes, even between tests; nor does
        # one whose results were lost.
        failed = self._failed() or self.cancel.is_set() or not written
        self.session.output.summary(passed=not failed)
        return EXIT_FAIL if failed else EXIT_PASS

    def _resolved(self) -> dict[str, Resolved]:
        return self.session.resolved()

    def _properties(self) -> dict[str, str]:
        props = {"tester-version": __version__, **properties(self._resolved()), **self.session.properties}
        if self.session.cluster is not None:
            props["api-requests"] = str(self.session.cluster.request_count)
        return props

    def _print_config(self) -> None:
        if not self.cfg.verbose:
            return
        print(f"{self.suite.binary} {__version__}: resolved configuration")
        for line in report_lines(self._resolved()):
            print(f"  {line}")
        if self.session.topology is not None:
            print("  nodes: " + ", ".join(self.session.topology.node_names))
            # Every node of the type, with its state (docs/DEGRADED-CLUSTERS.md).
            if self.session.topology.nodes_of_type:
                print(f"  nodes of type {self.session.topology.node_type}: {self.session.topology.states_text()}")
        sys.stdout.flush()

    def _not_run(self, name: str, reason: str) -> None:
        context = TestContext(self.session, name)
        context.junit_case = CaseResult(name, Outcome.SKIP, 0.0, reason)
        self.session.results.append(context.junit_case)
        context.write_result()
        self.session.output.ended("SKIP", name, 0.0, 0)

    def _failed(self) -> bool:
        return any(r.outcome in (Outcome.FAIL, Outcome.ERROR) for r in self.session.results)

    # -- cancellation ----------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # the tester plugin may run suites from a worker thread in tests
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self._signals and now - self._signals[0] < RELAYED_SIGNAL_SECONDS:
            print(f"{self.suite.binary}: {name} again within {RELAYED_SIGNAL_SECONDS:g}s of the first (kubetest2's "
                  "exec tester relays what the process group already got): one interrupt", file=sys.stderr, flush=True)
            return
        self._signals.append(now)
        if len(self._signals) == 1:
            print(f"\n{self.suite.binary}: received {name}: stopping; capturing logs and cleaning up "
                  "(send again to skip cleanup)", file=sys.stderr, flush=True)
            self.cancel.cancel(f"INTERRUPTED: received {name}")
        else:
            raise KeyboardInterrupt

    def _start_timeout(self) -> threading.Timer | None:
        if not self.cfg.test_timeout:
            return None
        limit = format_duration(self.cfg.test_timeout)
        reason = f"TIMEOUT: -test.timeout {limit} expired"

        def expire() -> None:
            now = time.monotonic()
            # Go rounds each running test's time to whole seconds, half away from zero.
            running = "".join(f"\n\t\t{name} ({format_duration(float(int(now - started + 0.5)))})"
                              for name, started in list(self.session.running.items()))
            self._timed_out = f"panic: test timed out after {limit}\n\trunning tests:{running}\n"
            print(f"\n{self.suite.binary}: {reason}: stopping the running tests; capturing logs, cleaning up, "
                  "writing JUnit, then exiting 2", file=sys.stderr, flush=True)
            self.cancel.cancel(reason)

        timer = threading.Timer(self.cfg.test_timeout, expire)
        timer.daemon = True
        timer.start()
        return timer
