"""code_fingerprint: what `hack/local-cluster up` compares to restart components started from older code."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.control import processes
from localcluster.control.processes import code_fingerprint

NODE_AGENT = [sys.executable, "-m", "localcluster.node_agent"]


def test_same_code_same_fingerprint():
    assert code_fingerprint(NODE_AGENT, []) == code_fingerprint(list(NODE_AGENT), [])


def test_our_package_sources_count_for_our_modules(tmp_path, monkeypatch):
    package = tmp_path / "localcluster"
    (package / "control").mkdir(parents=True)
    (package / "node_agent.py").write_text("A = 1\n")
    monkeypatch.setattr(processes, "__file__", str(package / "control" / "processes.py"))
    before = code_fingerprint(NODE_AGENT, [])
    (package / "node_agent.py").write_text("A = 2\n")
    assert code_fingerprint(NODE_AGENT, []) != before
    # A binary's fingerprint does not read our sources.
    binary = [str(tmp_path / "kwok")]
    unchanged = code_fingerprint(binary, [])
    (package / "node_agent.py").write_text("A = 3\n")
    assert code_fingerprint(binary, []) == unchanged


def test_the_executable_is_resolved_and_extra_files_count(tmp_path):
    v1, v2 = tmp_path / "kwok@v1" / "kwok", tmp_path / "kwok@v2" / "kwok"
    for binary in (v1, v2):
        binary.parent.mkdir()
        binary.write_text("")
    link = tmp_path / "kwok"
    link.symlink_to(v1)
    first = code_fingerprint([str(link)], [])
    link.unlink()
    link.symlink_to(v2)  # the same argv, a new version behind the link
    assert code_fingerprint([str(link)], []) != first
    stages = tmp_path / "stages.yaml"
    stages.write_text("a")
    with_stages = code_fingerprint([str(link)], [stages])
    stages.write_text("b")
    assert code_fingerprint([str(link)], [stages]) != with_stages
