"""Configuration: precedence, every malformed value, report and properties."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

import pytest

from harness.config.settings import SETTINGS, WORKLOADS_IMAGE, Config, Source, properties, report_lines, resolve
from harness.config.values import format_duration, parse_duration
from harness.errors import ConfigError
from harness.framework.cli import parse_args


def resolve_env(env: dict[str, str], argv: list[str] | None = None):
    return resolve(parse_args(argv or []), env)


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
    assert cfg.origin("node_type").source is Source.FLAG
    assert cfg.job_timeout == 300
    assert cfg.origin("job_timeout").source is Source.ENV
    assert cfg.launcher == "torchrun"
    assert cfg.origin("launcher").source is Source.DEFAULT
    assert cfg.node_count is None  # left for discovery


def test_upstream_image_flags_set_their_images():
    bert = resolve_env({}, ["--bertTrainingImage", "repo/bert:1"])
    # TestBertTraining's alone: the other training tests keep TRAINING_IMAGE
    assert (bert.bert_training_image, bert.training_image) == ("repo/bert:1", WORKLOADS_IMAGE)
    assert resolve_env({}, ["-pytorchImage=repo/pt:2"]).pytorch_image == "repo/pt:2"
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
    report = "\n".join(report_lines(cfg.resolved()))
    assert "node_count" in report and "env: NODE_COUNT" in report
    assert "s3cret" not in report
    props = properties(cfg.resolved())
    assert props["config.node_count"] == "2"
    assert props["config.node_count.source"] == "env: NODE_COUNT"
    assert "s3cret" not in str(props)
    assert "config.test_run" not in props  # runner flags are not training configuration


def test_every_setting_is_reachable():
    for setting in SETTINGS:
        assert setting.env or setting.flags, setting.name
        assert setting.help and setting.expected


def test_the_settings_page_documents_every_setting():
    # docs/SETTINGS.md is generated from SETTINGS (tests/unit/repo/test_generated_docs.py keeps it equal);
    # this says what "documented" means: each setting under its env name or its flags.
    from pathlib import Path

    page = (Path(__file__).resolve().parents[4] / "docs" / "SETTINGS.md").read_text()
    for setting in SETTINGS:
        spelled = [f"`{setting.env}`"] if setting.env else [f"`--{f}`" for f in setting.flags]
        assert any(s in page for s in spelled), f"docs/SETTINGS.md lacks {spelled}"


def test_the_config_is_frozen():
    cfg = resolve_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.node_count = 3  # type: ignore[misc]


def test_defaults_computed_at_resolution():
    first, second = resolve_env({}), resolve_env({})
    assert first.run_id != second.run_id and first.origin("run_id").detail == "random"
    assert first.artifacts.endswith("/_artifacts") and first.artifacts.startswith("/")


def _accepts(field_type: object, value_type: object) -> bool:
    """Whether a field declared `field_type` holds what a parser returning `value_type` gives."""
    options = typing.get_args(field_type) if typing.get_origin(field_type) in (typing.Union, type(int | None)) \
        else (field_type,)
    for option in options:
        if option == value_type:
            return True
        if typing.get_origin(option) is Mapping and typing.get_origin(value_type) is dict:
            return typing.get_args(option) == typing.get_args(value_type)
    return False


def test_every_setting_is_a_typed_field_and_every_field_a_setting():
    hints = typing.get_type_hints(Config)
    fields = {f.name for f in dataclasses.fields(Config)} - {"origins", "ignored_flags"}
    assert fields == {s.name for s in SETTINGS}
    for setting in SETTINGS:
        returns = typing.get_type_hints(setting.parse)["return"]
        assert _accepts(hints[setting.name], returns), f"{setting.name}: {hints[setting.name]} vs parser's {returns}"
        default = setting.default_value()
        if default is None:
            assert type(None) in typing.get_args(hints[setting.name]), f"{setting.name} defaults to None"
        else:
            assert _accepts(hints[setting.name], type(default)) or isinstance(default, Mapping), setting.name


def test_resolved_values_have_the_declared_types():
    cfg = resolve_env({"NODE_COUNT": "2", "JOB_TIMEOUT": "5m", "POD_ANNOTATIONS": "a=1", "KEEP_RESOURCES": "yes"},
                      ["--efaEnabled", "--test.timeout=1h"])
    assert (cfg.node_count, cfg.job_timeout, cfg.test_timeout) == (2, 300.0, 3600.0)
    assert cfg.pod_annotations == {"a": "1"} and cfg.keep_resources is True and cfg.efa_enabled is True


def test_nccl_tests_min_bw_is_read_by_the_harness_not_passed_to_pods(monkeypatch):
    """nccl-tests would judge it on the sweep's average and fail a healthy cluster (harness/verdict/bandwidth.py)."""
    from harness.config.settings import pod_environment_passthrough

    monkeypatch.setenv("NCCL_TESTS_MIN_BW", "400")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    passed = pod_environment_passthrough()
    assert passed.get("NCCL_DEBUG") == "INFO" and "NCCL_TESTS_MIN_BW" not in passed
