"""The test tiers and CI guards of tests/tiers.py, run on a small test file in a pytest of its own:
`full` tests deselected in the presubmit tier and run in the full one, opt-in tests deselected without
their variable, a skip of a real-node, speed or root-only test failing the run as root (and staying a
skip for another user), and every test's duration on disk for tests/durations.py, even when the run
is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]

SAMPLE = '''
import os
import time

import pytest


def test_plain():
    pass


@pytest.mark.full
def test_only_in_full():
    pass


@pytest.mark.opt_in("KT2T_SAMPLE_OPT_IN", "asked for")
def test_opt_in():
    pass


@pytest.mark.real_nodes
def test_real_node_that_skips():
    pytest.skip("no containerd here")


@pytest.mark.speed
@pytest.mark.skipif(True, reason="a tool is missing")
def test_speed_that_skips():
    pass


def test_ordinary_skip():
    pytest.skip("not a guarded test")


def test_slow():
    time.sleep(float(os.environ.get("SAMPLE_SLEEP", "0.3")))
'''

# Played as another user: the guard reads os.geteuid() when a report is made.
NOT_ROOT = "import os\nos.geteuid = lambda: 1000\n"


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None, conftest: str = "",
        wait: bool = True) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "conftest.py").write_text(conftest)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KT2T_")}
    full_env.update({"PYTHONPATH": str(TESTS), **(env or {})})
    command = [sys.executable, "-m", "pytest", "-p", "tiers", "-v", "-rA", "-p", "no:cacheprovider",
               "-o", "markers=real_nodes\nspeed\nroot_only\nfull\nopt_in", *args, str(tmp_path)]
    if not wait:
        return subprocess.Popen(command, cwd=tmp_path, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(command, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120,
                          check=False)


def outcome(done: subprocess.CompletedProcess[str], test: str) -> str:
    """The test's outcome on its `-v` line (`test_sample.py::test_x PASSED [ 14%]`), or "not run"."""
    for line in done.stdout.splitlines():
        if line.startswith(f"test_sample.py::{test} "):
            return line.split()[1]
    return "not run"


def test_presubmit_deselects_full_and_opt_in_tests(tmp_path: Path):
    done = run(tmp_path, conftest=NOT_ROOT)
    assert "tier: presubmit" in done.stdout
    assert outcome(done, "test_plain") == "PASSED"
    assert outcome(done, "test_only_in_full") == "not run"
    assert outcome(done, "test_opt_in") == "not run"
    assert "2 deselected" in done.stdout, done.stdout[-2000:]


def test_the_full_tier_runs_full_tests_and_an_opt_in_runs_when_asked(tmp_path: Path):
    done = run(tmp_path, env={"KT2T_TEST_TIER": "full", "KT2T_SAMPLE_OPT_IN": "1"}, conftest=NOT_ROOT)
    assert "tier: full" in done.stdout
    assert outcome(done, "test_only_in_full") == "PASSED"
    assert outcome(done, "test_opt_in") == "PASSED"
    assert "deselected" not in done.stdout


def test_an_unknown_tier_is_a_usage_error_naming_the_variable(tmp_path: Path):
    done = run(tmp_path, env={"KT2T_TEST_TIER": "nightly"})
    assert done.returncode != 0
    assert "KT2T_TEST_TIER='nightly': expected one of presubmit, full" in done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the guard acts as root only; this machine's CI runs as root")
def test_as_root_a_real_node_or_speed_test_that_skips_fails_the_run_with_its_reason(tmp_path: Path):
    done = run(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert outcome(done, "test_real_node_that_skips") == "FAILED"
    assert outcome(done, "test_speed_that_skips") == "ERROR"  # a skipif skips in set-up: a failed set-up
    assert outcome(done, "test_ordinary_skip") == "SKIPPED"
    assert "(real_nodes) skipped as root: " in done.stdout and "no containerd here" in done.stdout
    assert "(speed) skipped as root: " in done.stdout and "a tool is missing" in done.stdout


def test_for_another_user_those_skips_stay_skips(tmp_path: Path):
    done = run(tmp_path, conftest=NOT_ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert outcome(done, "test_real_node_that_skips") == "SKIPPED"
    assert outcome(done, "test_speed_that_skips") == "SKIPPED"


def test_durations_name_the_slowest_tests(tmp_path: Path):
    record = tmp_path / "out" / "durations.tsv"
    run(tmp_path, env={"KT2T_DURATIONS_FILE": str(record), "SAMPLE_SLEEP": "0.6"}, conftest=NOT_ROOT)
    printed = subprocess.run([sys.executable, str(TESTS / "durations.py"), "--top", "2", str(record)],
                             capture_output=True, text=True, check=True).stdout
    lines = printed.splitlines()
    assert lines[0].startswith("2 slowest of 5 tests"), printed
    assert lines[1].endswith("test_sample.py::test_slow"), printed
    assert float(lines[1].split("s")[0]) >= 0.6
    assert "still running" not in printed


def test_a_killed_run_still_names_the_test_it_was_in(tmp_path: Path):
    record = tmp_path / "durations.tsv"
    process = run(tmp_path, "-k", "plain or slow", env={"KT2T_DURATIONS_FILE": str(record), "SAMPLE_SLEEP": "120"},
                  conftest=NOT_ROOT, wait=False)
    deadline = time.monotonic() + 60
    while "test_slow" not in (record.read_text() if record.exists() else ""):
        assert time.monotonic() < deadline and process.poll() is None, "the sample run never reached test_slow"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    printed = subprocess.run([sys.executable, str(TESTS / "durations.py"), str(record)], capture_output=True,
                             text=True, check=True).stdout
    assert f"still running when {record.name} ended: " in printed and "test_sample.py::test_slow" in printed, printed
    assert "test_sample.py::test_plain" in printed


def test_a_malformed_durations_line_is_named(tmp_path: Path):
    record = tmp_path / "durations.tsv"
    record.write_text("1.00\tcall\ttests/x.py::test_a\nnot a record\n")
    done = subprocess.run([sys.executable, str(TESTS / "durations.py"), str(record)], capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0
    assert f"{record}:2: expected 'seconds<TAB>phase<TAB>node id'" in done.stderr


def test_sample_is_what_the_module_docstring_says():
    assert textwrap.dedent(SAMPLE).count("def test_") == 7
