"""docs/SETTINGS.md and docs/TESTS.md are generated (hack/gen_docs.py) from the settings' declarations, the
suites' tests and the threshold table; a page that differs from the code fails here, saying the command
that regenerates it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HACK = REPO / "hack"

from testbins import catalogue as gen_docs  # noqa: E402


@pytest.mark.parametrize("page", [gen_docs.SETTINGS_PAGE, gen_docs.TESTS_PAGE], ids=lambda p: p.name)
def test_the_generated_page_is_the_code_s(page: Path):
    expected = gen_docs.pages()[page]
    assert page.exists() and page.read_text() == expected, \
        f"{page.relative_to(REPO)} differs from the code: run `{gen_docs.REGENERATE}`"


def test_the_catalogue_agrees_with_the_code():
    assert gen_docs.problems() == []


def test_a_test_missing_from_the_catalogue_is_named(monkeypatch: pytest.MonkeyPatch):
    catalogue = dict(gen_docs.CATALOGUE)
    del catalogue["TestGPUCapacity"]
    catalogue["TestGone"] = gen_docs.CATALOGUE["TestMps"]
    monkeypatch.setattr(gen_docs, "CATALOGUE", catalogue)
    found = gen_docs.problems()
    assert any("lacks ['TestGPUCapacity']" in line for line in found), found
    assert any("names ['TestGone']" in line for line in found), found


def test_an_unknown_setting_or_check_is_named(monkeypatch: pytest.MonkeyPatch):
    entry = gen_docs.CATALOGUE["TestMps"]
    monkeypatch.setitem(gen_docs.CATALOGUE, "TestMps", gen_docs.Entry(entry.origin, entry.launches,
                                                                      (*entry.checks, "no.such"), ("NO_SUCH",)))
    monkeypatch.setitem(gen_docs.CHECKS, "never.made", ("x", "-"))
    found = gen_docs.problems()
    assert "TestMps: no setting NO_SUCH" in found
    assert "TestMps: check no.such has no entry in CHECKS" in found
    assert any(line.startswith("check never.made: the harness never makes it") for line in found), found


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
