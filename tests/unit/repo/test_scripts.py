"""The shell scripts the pods run (manifests/scripts/) lint clean with shellcheck (Debian's
`shellcheck`, a row of localcluster/base/system_packages.txt), and no Python module of the suites
holds a shell script in a string instead; the scripts the tests run sit beside them as files, and lint
clean too.

Marked root_only: hack/setup.sh installs shellcheck wherever it ran as root, so there a skip (no
shellcheck) fails the run (tests/tiers.py); elsewhere a missing shellcheck skips."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_layout import OWN_CODE, modules

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = sorted((REPO / "manifests" / "scripts").glob("*.sh"))
# The bound (#32): a string of more lines than this that reads as shell belongs in a file.
MAX_SCRIPT_LINES = 5
SHELL_SIGNS = ("set -e", "set -u", "#!/bin/", "; then", "\nfi\n", "<<'")


def shellcheck(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("shellcheck")
    if binary is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck; hack/setup.sh installs it)")
    return subprocess.run([binary, "--format=gcc", *map(str, paths)], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.root_only
def test_the_pods_scripts_lint_clean():
    assert {p.name for p in SCRIPTS} >= {"containerd-check.sh", "dcgm-diag.sh", "driver-capabilities-check.sh",
                                        "gpu-sharing-workload.sh"}
    done = shellcheck(SCRIPTS)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.root_only
def test_the_tests_scripts_lint_clean():
    assert len(TEST_SCRIPTS) >= 3, TEST_SCRIPTS
    done = shellcheck(TEST_SCRIPTS)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.root_only
def test_a_finding_fails_the_check(tmp_path: Path):
    # What the check above would see in a script with an unquoted expansion (SC2086).
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/bin/sh\nrm -rf $TARGET/cache\n')
    done = shellcheck([bad])
    assert done.returncode != 0 and "SC2086" in done.stdout


def shell_strings(path: Path) -> list[tuple[int, int]]:
    """(line, lines) of each string constant in a module, docstrings aside, that reads as a shell
    script of more than MAX_SCRIPT_LINES lines."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(owner.body[0].value) for owner in ast.walk(tree)
                  if isinstance(owner, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and owner.body and isinstance(owner.body[0], ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            lines = node.value.count("\n") + 1
            if lines > MAX_SCRIPT_LINES and any(sign in node.value for sign in SHELL_SIGNS):
                found.append((node.lineno, lines))
    return found


# The scripts the tests run (in pods, or under capsh), beside the test modules that run them.
TEST_SCRIPTS = sorted((REPO / "tests").rglob("*.sh"))


def test_no_module_holds_a_shell_script_in_a_string():
    # Every module of the repository's own Python, as the layout test reads them (hack/go holds Go's).
    held = {f"{path.relative_to(REPO)}:{line}": lines for name, path in sorted(modules(REPO, OWN_CODE).items())
            if not name.startswith("hack.go") for line, lines in shell_strings(path)}
    assert not held, f"shell scripts in Python strings (make them files: manifests/scripts/, beside a test): {held}"
