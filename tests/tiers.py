"""The two test tiers and the guards that keep CI inside its 90 minutes (a pytest plugin).

- **Tiers**, as kubernetes-sigs projects run presubmit and periodic jobs. `hack/test` (what `.ci/run`
  runs) is the presubmit tier: every kind of coverage once. `hack/test --full` sets
  KT2T_TEST_TIER=full and adds the tests marked `full`: repeat and soak runs, the full workload x
  launcher matrix, speed and pair tests, scale benches. In the presubmit tier they are deselected
  (counted as such in pytest's summary line), never skipped. `FULL` tells a test module which tier
  runs, for a matrix it trims in the presubmit tier (`trainings()`).
- **Opt-in tests** (marker `opt_in("ENV_VAR", "why")`): deselected unless ENV_VAR=1. A judgement this
  machine cannot hold (an absolute CPU speed floor) is kept runnable without turning into a skip.
- **No silent loss of coverage**: as root, a test marked `real_nodes`, `speed` or `root_only` that
  skips fails instead, with the skip's reason: a missing tool must not turn coverage into a skip.
- **Where the time went**: with KT2T_DURATIONS_FILE set, every test phase's duration is appended to
  that file as it ends (`seconds<TAB>phase<TAB>node id`, and `start<TAB>-<TAB>node id` when a test
  starts), so a run killed by `.ci/run`'s overall limit can still name its slowest tests and the
  one it was in (`python3 tests/durations.py FILE...`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIER_ENV = "KT2T_TEST_TIER"
TIERS = ("presubmit", "full")
DURATIONS_ENV = "KT2T_DURATIONS_FILE"
# Markers whose skip, as root, fails the run: these tests can run wherever the repo's set-up ran.
MUST_RUN_AS_ROOT = ("real_nodes", "speed", "root_only")


def tier() -> str:
    value = os.environ.get(TIER_ENV, "presubmit") or "presubmit"
    if value not in TIERS:
        raise pytest.UsageError(f"{TIER_ENV}={value!r}: expected one of {', '.join(TIERS)}")
    return value


FULL = tier() == "full"


def trainings(every: tuple[str, ...], presubmit: tuple[str, ...]) -> tuple[str, ...]:
    """The trainings a launcher's test runs: all of them in the full tier, `presubmit` (one training
    of that launcher; the other launchers' tests train the rest) otherwise."""
    missing = set(presubmit) - set(every)
    if missing:
        raise ValueError(f"presubmit trainings {sorted(missing)} are not among {every}")
    return every if FULL else presubmit


def pytest_report_header(config: pytest.Config) -> str:
    return (f"tier: {tier()} ({TIER_ENV}; hack/test --full runs the full tier)"
            + (f", durations to {os.environ[DURATIONS_ENV]}" if os.environ.get(DURATIONS_ENV) else ""))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    dropped = [item for item in items if not _in_this_run(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


def _in_this_run(item: pytest.Item) -> bool:
    """False for a `full` test in the presubmit tier and an opt-in test whose variable is not 1."""
    if item.get_closest_marker("full") and not FULL:
        return False
    opt_in = item.get_closest_marker("opt_in")
    return not opt_in or os.environ.get(_opt_in_variable(item, opt_in)) == "1"


def _opt_in_variable(item: pytest.Item, marker: pytest.Mark) -> str:
    if not marker.args or not isinstance(marker.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.opt_in needs the variable that turns it on")
    return marker.args[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or os.geteuid() != 0:
        return
    guarded = [name for name in MUST_RUN_AS_ROOT if item.get_closest_marker(name)]
    if not guarded:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} ({', '.join(guarded)}) skipped as root: {reason}\n"
                       "As root this test can run: a skip here is lost coverage, so it fails the run. "
                       "Install what is missing (hack/system-packages.sh) or fix the cause.")


def _record(line: str) -> None:
    path = os.environ.get(DURATIONS_ENV)
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:  # appended and closed per line: survives a kill
        out.write(line + "\n")


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _record(f"start\t-\t{nodeid}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record(f"{report.duration:.2f}\t{report.when}\t{report.nodeid}")
