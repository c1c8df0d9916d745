"""JUnit output: the layout CI expects, well-formed whatever the logs held; metadata merge; both
written atomically, readable by another user (0644)."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET

import junitparser
import pytest

from harness.config import artifacts
from harness.config.artifacts import add_metadata
from harness.report.junit import CaseResult, Outcome, write_junit, xml_safe

HOSTILE = (b"start \x00\x01\x02\x07\x08\x0b\x0c\x1b[31mred\x1b[0m \x1b]0;title\x07 \xff\xfe\xc3(\xed\xa0\x80 "
           b"]]> <!-- & </system-out> \xef\xbf\xbe end\n")


def write(tmp_path, results, props=None):
    path = tmp_path / "junit_e2e-nvidia-training.xml"
    write_junit(path, "e2e-nvidia-training", results, props or {"config.node_count": "2"})
    return path


def test_layout_and_outcomes(tmp_path):
    path = write(tmp_path, [
        CaseResult("TestBertTraining", Outcome.FAIL, 12.3, "pod bert-training-1 OOMKilled on node n1",
                   "detail", "=== pod bert-training-0 | node n0 | container worker\nhello\n",
                   {"metrics.throughput.median": "9.9"}),
        CaseResult("TestBertTraining/sub", Outcome.SKIP, 0, "no GPUs"),
        CaseResult("TestNCCLTests", Outcome.ERROR, 1, "ClusterError: forbidden"),
        CaseResult("TestGPUCapacity", Outcome.PASS, 2),
    ])
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "e2e-nvidia-training"
    assert suite.find("properties/property[@name='config.node_count']").get("value") == "2"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["TestBertTraining", "TestBertTraining/sub", "TestNCCLTests",
                                              "TestGPUCapacity"]
    assert all(c.get("classname") == "e2e-nvidia-training" for c in cases)
    assert cases[0].find("failure").get("message") == "pod bert-training-1 OOMKilled on node n1"
    assert cases[0].find("properties/property").get("name") == "metrics.throughput.median"
    assert "hello" in cases[0].find("system-out").text
    assert cases[1].find("skipped") is not None
    assert cases[2].find("error") is not None
    parsed = junitparser.JUnitXml.fromfile(str(path))
    assert sum(1 for s in parsed for _ in s) == 4


@pytest.mark.parametrize("size", [1, 100_000])
def test_hostile_bytes_give_well_formed_xml(tmp_path, size):
    text = xml_safe(HOSTILE * size)
    path = write(tmp_path, [CaseResult("TestX", Outcome.FAIL, 1, xml_safe(HOSTILE), text, text)])
    # A strict parser (expat) and junitparser both accept it.
    ET.parse(path)
    parsed = junitparser.JUnitXml.fromfile(str(path))
    case = next(iter(next(iter(parsed))))
    assert "end" in case.system_out
    assert "\x1b" not in path.read_text(encoding="utf-8")


def test_reserved_runner_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="kubetest2"):
        write_junit(tmp_path / "junit_runner.xml", "x", [], {})


def test_metadata_keeps_existing_keys(tmp_path):
    (tmp_path / "metadata.json").write_text(json.dumps({"tester-version": "kubetest2's", "k": "v"}))
    add_metadata(tmp_path, {"tester-version": "0.1.0", "new": "x"})
    data = json.loads((tmp_path / "metadata.json").read_text())
    assert data == {"tester-version": "kubetest2's", "k": "v", "new": "x"}


def test_metadata_fills_an_empty_value(tmp_path):
    # kubetest2's exec tester writes an empty tester-version.
    (tmp_path / "metadata.json").write_text(json.dumps({"tester-version": "", "kubetest-version": "x"}))
    add_metadata(tmp_path, {"tester-version": "0.1.0"})
    assert json.loads((tmp_path / "metadata.json").read_text()) == {"tester-version": "0.1.0", "kubetest-version": "x"}


def test_metadata_created_when_absent(tmp_path):
    add_metadata(tmp_path, {"tester-version": "0.1.0"})
    assert json.loads((tmp_path / "metadata.json").read_text()) == {"tester-version": "0.1.0"}


def test_junit_and_metadata_are_readable_by_other_users_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        path = write(tmp_path, [CaseResult("TestX")])
        add_metadata(tmp_path, {"tester-version": "0.1.0"})
    finally:
        os.umask(old)
    for written in (path, tmp_path / "metadata.json"):
        assert stat.S_IMODE(written.stat().st_mode) == 0o644, written


def test_junit_is_replaced_whole_never_written_in_place(tmp_path):
    first = write(tmp_path, [CaseResult("TestX")])
    inode = first.stat().st_ino
    reader = first.open("rb")  # a reader of the old file keeps reading the old file
    write(tmp_path, [CaseResult("TestX"), CaseResult("TestY", Outcome.FAIL, 1, "boom")])
    assert first.stat().st_ino != inode
    assert b"TestY" not in reader.read()
    reader.close()
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary file left


def test_a_failed_write_leaves_the_previous_junit_and_no_temporary_file(tmp_path, monkeypatch):
    path = write(tmp_path, [CaseResult("TestX")])
    before = path.read_bytes()

    def disk_full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(artifacts.os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write(tmp_path, [CaseResult("TestY")])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
