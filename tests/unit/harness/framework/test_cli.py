"""The Go-test-compatible command line."""

from __future__ import annotations

import re

import pytest

from harness.errors import UsageError
from harness.framework.cli import parse_args, usage, wants_help
from harness.framework.suite import Feature, Selector, Suite, TestCase, listed, split_run_pattern


@pytest.mark.parametrize("argv", [
    ["--test.run=TestBertTraining"], ["-test.run=TestBertTraining"], ["-test.run", "TestBertTraining"],
    ["--test.run", "TestBertTraining"],
])
def test_flag_forms(argv):
    assert parse_args(argv)["test_run"][0] == "TestBertTraining"


def test_bool_flag_alone_and_explicit():
    assert parse_args(["-test.v"])["test_v"][0] == "true"
    assert parse_args(["--test.v=false"])["test_v"][0] == "false"
    # A bool flag never swallows the next argument.
    assert parse_args(["-test.v", "-test.run", "X"])["test_run"][0] == "X"


def test_upstream_command_lines_parse():
    argv = ["--test.timeout=60m", "--test.v", "--test.run=^TestMPIJobPytorchTraining$/multi-node",
            "--efaEnabled=true", "--nvidiaTestImage=IMG", "--nodeType=p5.48xlarge"]
    values = parse_args(argv)
    assert values["node_type"][0] == "p5.48xlarge"
    assert values["efa_enabled"][0] == "true"


def test_unknown_flag_is_usage_error():
    with pytest.raises(UsageError, match="flag provided but not defined: -nodeTyp"):
        parse_args(["--nodeTyp=x"])


def test_positional_argument_is_usage_error():
    with pytest.raises(UsageError, match="unexpected argument 'stray'"):
        parse_args(["stray"])


def test_missing_value_is_usage_error():
    with pytest.raises(UsageError, match=r"flag needs an argument: -test\.run"):
        parse_args(["-test.run"])


def test_help_anywhere_like_go_flag():
    assert wants_help(["--help", "--test.run=X"])
    assert wants_help(["--nodeType=x", "-h"])
    assert not wants_help(["--nodeType=x"])


def test_usage_lists_every_flag_and_env():
    text = usage("e2e-nvidia-training", "summary", ["TestBertTraining"])
    for needle in ("--nodeType", "$NODE_COUNT", "--efaEnabled", "--bertTrainingImage", "--test.timeout",
                   "--installDevicePlugin", "--kubeconfig", "--namespace", "$JOB_TIMEOUT", "TestBertTraining"):
        assert needle in text


def test_run_pattern_split_like_go():
    assert split_run_pattern("^TestA$/multi-node") == ["^TestA$", "multi-node"]
    assert split_run_pattern("Test(a/b)/x") == ["Test(a/b)", "x"]


def test_selector_levels():
    sel = Selector(run=tuple(re.compile(p) for p in split_run_pattern("^TestNCCLTests$/multi")))
    assert sel.matches("TestNCCLTests")
    assert sel.matches("TestNCCLTests/multi-node")
    assert not sel.matches("TestNCCLTests/single-node")
    assert not sel.matches("TestNCCLTestsX")


def test_selector_picks_the_suites_tests_and_list_filters_names():
    suite = Suite("b", "s", [TestCase("TestA", (Feature("a", lambda t: None),)),
                             TestCase("TestB", (Feature("b", lambda t: None),))])
    assert [s.test.name for s in Selector(run=(re.compile("B"),)).select(suite)] == ["TestB"]
    assert [s.test.name for s in Selector(skip_features=re.compile("a")).select(suite)] == ["TestB"]
    assert listed(suite, "Test") == ["TestA", "TestB"]
