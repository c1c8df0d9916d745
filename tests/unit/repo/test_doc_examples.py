"""The shell examples of the README and docs/ (issue 46): every ```sh block lints clean with
shellcheck, and the ones that need no cloud run for real: the image tag line of
docs/REAL-CLUSTER.md gives the project's version, with nothing newer than Python 3.10 asked for
(the tag line reads pyproject.toml with sed, so it needs no interpreter at all)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import __version__

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```sh\n(?P<body>.*?)^```$", re.M | re.S)
# Variables a reader sets beforehand (their meaning is in the text around the block).
READER_SET = ("export REGISTRY=registry.example V=0.1.0 SA=system:serviceaccount:default:kubetest2-training "
              "UPSTREAM_BERT_IMAGE=bert:upstream\n")


def shell_blocks() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(REPO)}#{n}", match["body"]) for page in PAGES
            for n, match in enumerate(BLOCK.finditer(page.read_text()), 1)]


def tag_line() -> str:
    (line,) = [line for line in (REPO / "docs" / "REAL-CLUSTER.md").read_text().splitlines()
               if line.startswith("V=$(")]
    return line


def test_the_pages_have_shell_examples():
    names = {name.split("#")[0] for name, _ in shell_blocks()}
    assert {"README.md", "docs/REAL-CLUSTER.md", "docs/RBAC.md", "docs/RUNNING.md"} <= names, names


@pytest.mark.root_only
@pytest.mark.parametrize("block", shell_blocks(), ids=lambda b: b[0])
def test_each_shell_example_lints_clean(block: tuple[str, str], tmp_path: Path):
    binary = shutil.which("shellcheck")
    if binary is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck; hack/setup.sh installs it)")
    name, body = block
    script = tmp_path / "example.sh"
    script.write_text("#!/usr/bin/env bash\n" + READER_SET + body)
    # Warnings and errors: quoting every `$HOME` (SC2086, a note) would make the examples harder to read.
    done = subprocess.run([binary, "--format=gcc", "--severity=warning", str(script)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{name}:\n{done.stdout}{done.stderr}"


def test_the_tag_line_gives_the_version_without_python(tmp_path: Path):
    # No python on PATH at all: a line that imports tomllib (3.11+) gave an empty tag under 3.10.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sed",):
        (tools / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    done = subprocess.run(["/bin/bash", "-c", tag_line() + '\nprintf %s "$V"'], cwd=REPO, capture_output=True,
                          text=True, timeout=30, check=True, env={"PATH": str(tools)})
    assert done.stdout == __version__, (done.stdout, done.stderr)
    assert "tomllib" not in tag_line() and "python" not in tag_line()


def test_no_example_needs_a_module_newer_than_python_3_10():
    text = "\n".join(body for _, body in shell_blocks())
    assert not re.search(r"\b(tomllib|wsgiref\.types)\b", text), "a 3.11-only module in a shell example"
