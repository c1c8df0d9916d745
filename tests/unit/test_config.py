"""Configuration: precedence, every malformed value, report and properties."""

from __future__ import annotations

import pytest

from harness.cli import parse_args
from harness.config import SETTINGS, Source, format_duration, parse_duration, resolve
from harness.errors import ConfigError


def resolve_env(env: dict[str, str], argv: list[str] | None = None):
    return resolve(parse_args(argv or []).flag_values, env)


@pytest.mark.parametrize(("text", "seconds"), [
    ("60m", 3600), ("1h30m", 5400), ("2.5s", 2.5), ("0", 0), ("500ms", 0.5), ("1h0m0s", 3600),
])
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5 minutes", "60", "m", "", "1d", "-5m"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration_like_go():
    assert format_duration(3600) == "1h0m0s"
    assert format_duration(1200) == "20m0s"


def test_flag_beats_env_beats_default():
    cfg = resolve_env({"NODE_TYPE": "p4d.24xlarge", "JOB_TIMEOUT": "5m"}, ["--nodeType=p5.48xlarge"])
    assert cfg.node_type == "p5.48xlarge"
    assert cfg.source_of("node_type") is Source.FLAG
    assert cfg.job_timeout == 300
    assert cfg.source_of("job_timeout") is Source.ENV
    assert cfg.launcher == "torchrun"
    assert cfg.source_of("launcher") is Source.DEFAULT
    assert cfg.node_count is None  # left for discovery


def test_upstream_image_flags_set_training_image():
    assert resolve_env({}, ["--bertTrainingImage", "repo/bert:1"]).training_image == "repo/bert:1"
    assert resolve_env({}, ["-pytorchImage=repo/pt:2"]).training_image == "repo/pt:2"
    assert resolve_env({}, ["--nvidiaTestImage=repo/nccl:3"]).nccl_tests_image == "repo/nccl:3"


@pytest.mark.parametrize(("env", "needle"), [
    ({"NODE_COUNT": "abc"}, "NODE_COUNT='abc'"),
    ({"NODE_COUNT": "0"}, "NODE_COUNT='0'"),
    ({"GPUS_PER_NODE": "-1"}, "GPUS_PER_NODE='-1'"),
    ({"EFA_PER_NODE": "many"}, "EFA_PER_NODE='many'"),
    ({"JOB_TIMEOUT": "5 minutes"}, "JOB_TIMEOUT='5 minutes'"),
    ({"DISCOVERY_TIMEOUT": "soon"}, "DISCOVERY_TIMEOUT='soon'"),
    ({"ACCELERATOR": "tpu"}, "ACCELERATOR='tpu'"),
    ({"LAUNCHER": "ssh"}, "LAUNCHER='ssh'"),
    ({"KEEP_RESOURCES": "maybe"}, "KEEP_RESOURCES='maybe'"),
    ({"TRAINING_IMAGE": "Not An Image"}, "TRAINING_IMAGE='Not An Image'"),
    ({"STRAGGLER_FRACTION": "1.5"}, "STRAGGLER_FRACTION='1.5'"),
    ({"WORKLOAD_SIZE": "huge"}, "WORKLOAD_SIZE='huge'"),
    ({"POD_ANNOTATIONS": "no-equals-sign"}, "POD_ANNOTATIONS='no-equals-sign'"),
    ({"NCCL_TESTS_MIN_BW": "-3"}, "NCCL_TESTS_MIN_BW='-3'"),
])
def test_malformed_env_names_variable_value_and_expectation(env, needle):
    with pytest.raises(ConfigError) as err:
        resolve_env(env)
    assert needle in str(err.value)
    assert "expected" in str(err.value)


@pytest.mark.parametrize(("argv", "needle"), [
    (["--test.timeout=forever"], "--test.timeout='forever'"),
    (["-test.run", "Test[("], "-test.run='Test[('"),
    (["--namespace=Bad_Name"], "--namespace='Bad_Name'"),
    (["--efaEnabled=perhaps"], "--efaEnabled='perhaps'"),
    (["--kubeconfig="], "--kubeconfig=''"),
])
def test_malformed_flags(argv, needle):
    with pytest.raises(ConfigError) as err:
        resolve_env({}, argv)
    assert needle in str(err.value)


def test_all_errors_reported_together():
    with pytest.raises(ConfigError) as err:
        resolve_env({"NODE_COUNT": "abc", "JOB_TIMEOUT": "x"})
    assert "NODE_COUNT" in str(err.value)
    assert "JOB_TIMEOUT" in str(err.value)


def test_report_and_properties_show_sources_and_redact_secrets():
    cfg = resolve_env({"NODE_COUNT": "2", "POD_ANNOTATIONS": "a=1,api-token=s3cret"})
    report = "\n".join(cfg.report_lines())
    assert "node_count" in report and "env: NODE_COUNT" in report
    assert "s3cret" not in report
    props = cfg.properties()
    assert props["config.node_count"] == "2"
    assert props["config.node_count.source"] == "env: NODE_COUNT"
    assert "s3cret" not in str(props)
    assert "config.test_run" not in props  # runner flags are not training configuration


def test_every_setting_is_reachable():
    for setting in SETTINGS:
        assert setting.env or setting.flags, setting.name
        assert setting.help and setting.expected


def test_readme_documents_every_setting():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for setting in SETTINGS:
        if setting.group != "config":
            continue
        spelled = [f"`{setting.env}`"] if setting.env else [f"`--{f}`" for f in setting.flags]
        assert any(s in readme for s in spelled), f"README lacks {spelled}"
