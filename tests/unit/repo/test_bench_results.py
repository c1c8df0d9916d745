"""bench/ci_budget.sh --record writes its figure, dated, into bench/RESULTS.md (the README carries no
timings). Run on a throwaway repository whose `.ci/run` only exits, so nothing real is timed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_ci_budget_record_appends_a_dated_row(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / ".ci").mkdir()
    shutil.copy(REPO / "bench" / "ci_budget.sh", repo / "bench" / "ci_budget.sh")
    (repo / "bench" / "RESULTS.md").write_text("# Measured results\n")
    (repo / ".ci" / "run").write_text("#!/usr/bin/env bash\nexit 0\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    for _ in range(2):
        done = subprocess.run(["bash", str(repo / "bench" / "ci_budget.sh"), "--record", str(tmp_path / "out")],
                              capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        shutil.rmtree(tmp_path / "out")
    text = (repo / "bench" / "RESULTS.md").read_text()
    assert text.count("## CI budget (bench/ci_budget.sh --record)") == 1
    row = (r"^\| \d{4}-\d\d-\d\d \| \d+ cores, load [\d.]+ \| ci_budget_warm \| 0 min \d+ s \| 0 "
           r"\| [0-9a-f]+ \|$")
    rows = re.findall(row, text, re.MULTILINE)
    assert len(rows) == 2, text
