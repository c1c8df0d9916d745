"""docs/SETTINGS.md, docs/TESTS.md and the check table of docs/VERDICTS.md are generated (hack/gen_docs.py)
from the settings' declarations, the suites' tests, the kinds of check declared beside their code and the
threshold table; a page that differs from the code fails here, saying the command that regenerates it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.framework.suite import Suite, TestCase

REPO = Path(__file__).resolve().parents[3]
HACK = REPO / "hack"

from testbins import catalogue as gen_docs  # noqa: E402


@pytest.mark.parametrize("page", [gen_docs.SETTINGS_PAGE, gen_docs.TESTS_PAGE, gen_docs.VERDICTS_PAGE],
                         ids=lambda p: p.name)
def test_the_generated_page_is_the_code_s(page: Path):
    expected = gen_docs.pages()[page]
    assert page.exists() and page.read_text() == expected, \
        f"{page.relative_to(REPO)} differs from the code: run `{gen_docs.REGENERATE}`"


def test_the_catalogue_agrees_with_the_code():
    assert gen_docs.problems() == []


def _with_test(monkeypatch: pytest.MonkeyPatch, test: TestCase) -> None:
    """The suites as the code declares them, plus one suite holding `test`."""
    suites = gen_docs._suites()
    monkeypatch.setattr(gen_docs, "_suites", lambda: (*suites, Suite("e2e-extra", "extra", [test])))


def test_a_test_declaring_no_launch_an_unknown_setting_or_a_foreign_check_is_named(
        monkeypatch: pytest.MonkeyPatch):
    from harness.verdict.checks import CheckKind
    from harness.verdict.training import LOSS

    twin = CheckKind(LOSS.name, LOSS.fails_when)  # same name, not the declared one
    _with_test(monkeypatch, TestCase("TestExtra", (), checks=(twin,), settings=("NO_SUCH",)))
    found = gen_docs.problems()
    assert "e2e-extra TestExtra: declares no `launches` (what it runs, for docs/TESTS.md)" in found
    assert "e2e-extra TestExtra: no setting NO_SUCH (docs/SETTINGS.md)" in found
    assert "e2e-extra TestExtra: check loss is not the declared one (harness.verdict.checks.declare)" in found


def test_a_kind_no_test_declares_is_named(monkeypatch: pytest.MonkeyPatch):
    from harness.verdict import checks

    monkeypatch.setitem(checks.KINDS, "never.judged", checks.CheckKind("never.judged", "x", settings=("NO_SUCH",)))
    found = gen_docs.problems()
    assert "check never.judged: declared, but no test declares it (Suite.test / Suite.features checks=)" in found
    assert "check never.judged: no setting NO_SUCH (docs/SETTINGS.md)" in found


def test_every_declared_check_is_in_the_verdict_table_with_its_tests():
    from harness.verdict.checks import KINDS

    table = gen_docs.checks_table()
    for name in KINDS:
        assert f"| `{name}` |" in table, name
    assert "| `capacity.gpus_seen` |" in table and "| TestGPUCapacity |" in table


def test_a_verdict_page_without_its_markers_is_refused():
    with pytest.raises(SystemExit, match="lacks the markers of its check table"):
        gen_docs.verdicts_page("# Verdicts\n\nno table here\n")


def test_check_mode_says_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]):
    stale = tmp_path / "SETTINGS.md"
    stale.write_text("old\n")
    monkeypatch.setattr(gen_docs, "pages", lambda: {stale: "new\n"})
    monkeypatch.setattr(gen_docs, "REPO", tmp_path)
    assert gen_docs.main(["--check"]) == 1
    assert "SETTINGS.md differ from the code: run `.venv/bin/python hack/gen_docs.py`" in capsys.readouterr().err
    assert stale.read_text() == "old\n"  # --check writes nothing
    assert gen_docs.main([]) == 0 and stale.read_text() == "new\n"


def test_the_script_runs_from_a_clone():
    done = subprocess.run([sys.executable, str(HACK / "gen_docs.py"), "--check"], capture_output=True, text=True,
                          check=False, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
