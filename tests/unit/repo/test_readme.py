"""README.md is the front door (issue 35): short, the two commands as they are, the six steps to run
against your own cluster, and a way to every page of docs/. Measured figures live in bench/RESULTS.md,
not in its prose."""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the dev extra installs tomli, the same parser
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[3]
README = (REPO / "README.md").read_text()
TWO_COMMANDS = "\n".join([
    "```sh",
    "hack/main-job   # the main job: set-up, a local cluster, then the training suite through kubetest2",
    "hack/test       # the tests: set-up, ruff, hadolint, shellcheck, then pytest (unit, set-up, workloads, browser, "
    "integration, real nodes)",
    "```"])


def test_it_is_short_and_its_lines_are_too():
    lines = README.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"
    long = [n for n, line in enumerate(lines, start=1) if len(line) > 200]
    assert not long, f"README.md lines over 200 characters: {long}"


def test_no_dated_timings_or_commit_hashes():
    # Figures go to bench/RESULTS.md with their date and machine.
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", README)
    assert not re.findall(r"\b\d+ min \d+ s\b", README)
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", README)


def test_the_two_commands_as_they_are():
    assert TWO_COMMANDS in README
    assert "hack/test" in (REPO / ".ci" / "run").read_text()


def test_six_steps_to_your_own_cluster():
    section = README.split("\n## Run it against your own cluster\n", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\*\*(\d)\. ([^*]+)\*\*", section, re.MULTILINE)
    assert [n for n, _ in steps] == ["1", "2", "3", "4", "5", "6"], steps
    assert "kubectl apply -f manifests/rbac.yaml" in section
    assert "kubetest2 noop" in section


def test_the_image_tags_are_the_project_version():
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    tags = set(re.findall(r"kubetest2-training/(?:workloads|nccl-tests):([\w.-]+)", README))
    assert tags == {version}, f"README.md tags {tags}; pyproject.toml's version is {version}"


def test_every_docs_page_is_linked():
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    missing = sorted(p for p in pages if p not in README)
    assert not missing, f"README.md does not link {missing}"
