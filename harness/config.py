"""Every setting declared once, as a typed field of Config: env name, flags, parser, default, help.

The flag parser (harness.cli), the usage text, the printed resolved configuration and the JUnit
properties are all generated from these declarations (SETTINGS). This is the only module that
reads os.environ.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.parsers import (
    choice,
    format_duration,
    parse_bool,
    parse_count,
    parse_dns_label,
    parse_duration,
    parse_fraction,
    parse_image,
    parse_key_values,
    parse_non_negative,
    parse_path,
    parse_positive_float,
    parse_regex,
    parse_text,
)
from harness.redaction import looks_secret, redact

GO_TEST = "go test flags"
TRAINING = "config"
E2E_FRAMEWORK = "e2e-framework flags (accepted for command-line compatibility)"
DEFAULT_ARTIFACTS = "_artifacts"


class Source(str, Enum):
    """Where a resolved value came from, printed beside it."""

    FLAG = "flag"
    ENV = "env"
    DISCOVERED = "discovered"
    DEFAULT = "default"
    DERIVED = "derived"


@dataclass(frozen=True)
class Origin:
    """Where a value came from: the kind of source and the detail (`--nodeType`, `node capacity`)."""

    source: Source
    detail: str

    def __str__(self) -> str:
        return f"{self.source.value}: {self.detail}"


@dataclass(frozen=True)
class Setting:
    """One setting: how it is spelled in the environment and on the command line, and its type."""

    name: str
    help: str
    parse: Callable[[str], Any]
    expected: str
    env: str | None = None
    flags: tuple[str, ...] = ()
    default: Any = None
    # A default computed at resolution (a random run id, an absolute path), and how it is shown.
    default_factory: Callable[[], Any] | None = None
    default_origin: str = "default"
    # Go-style boolean flag: `-test.v` alone means true.
    is_bool_flag: bool = False
    # Runner flags (test.*) and e2e-framework flags are not training configuration.
    group: str = TRAINING

    def default_value(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default


_SETTING = "setting"


def setting(help: str, parse: Callable[[str], Any], expected: str, **spelling: Any) -> Any:
    """Declare a Config field as a setting (name = the field's name; see Setting for the rest)."""
    return field(metadata={_SETTING: Setting("", help, parse, expected, **spelling)})


def random_run_id() -> str:
    return uuid.uuid4().hex[:8]


def default_artifacts() -> str:
    return parse_path(DEFAULT_ARTIFACTS)


@dataclass(frozen=True)
class Config:
    """The resolved configuration: one typed field per setting, and where each value came from.

    Unset optional values (None) are for discovery to find: see harness.topology.Topology.
    """

    # -- Go testing flags -----------------------------------------------------------------------
    test_run: str = setting("run only tests (and subtests) matching this regexp, like go test",
                            parse_regex, "a regular expression", flags=("test.run",), default="",
                            group=GO_TEST)
    test_list: str | None = setting("list tests matching this regexp and exit without contacting the "
                                    "cluster", parse_regex, "a regular expression", flags=("test.list",),
                                    group=GO_TEST)
    test_v: bool = setting("verbose: print every test's progress as it runs", parse_bool, "true or false",
                           flags=("test.v",), default=False, is_bool_flag=True, group=GO_TEST)
    test_timeout: float = setting("fail every running test after this long (Go duration; 0 = none)",
                                  parse_duration, "a Go duration like 60m or 1h30m", flags=("test.timeout",),
                                  default=0.0, group=GO_TEST)
    test_failfast: bool = setting("do not start new tests after the first failure", parse_bool,
                                  "true or false", flags=("test.failfast",), default=False, is_bool_flag=True,
                                  group=GO_TEST)
    # -- Training configuration (README "Configuration") ----------------------------------------
    node_type: str | None = setting("instance type (node.kubernetes.io/instance-type) to run on; unset: "
                                    "the single type present", parse_text, "an instance type name",
                                    env="NODE_TYPE", flags=("nodeType",))
    node_count: int | None = setting("nodes to use; unset: all discovered nodes of that type", parse_count,
                                     "a whole number >= 1", env="NODE_COUNT")
    gpus_per_node: int | None = setting("GPUs (processes) per node; unset: the nodes' nvidia.com/gpu "
                                        "capacity (1 process with ACCELERATOR=cpu)", parse_non_negative,
                                        "a whole number >= 0", env="GPUS_PER_NODE")
    efa_per_node: int | None = setting("EFA devices per node; unset: the nodes' vpc.amazonaws.com/efa "
                                       "capacity", parse_non_negative, "a whole number >= 0", env="EFA_PER_NODE")
    efa_enabled: bool | None = setting("require EFA (true) or use none (false); unset: use what nodes "
                                       "advertise", parse_bool, "true or false", flags=("efaEnabled",),
                                       is_bool_flag=True)
    accelerator: str = setting("nvidia (NCCL, GPU requests) or cpu (gloo, no GPU requests)",
                               choice("nvidia", "cpu"), "nvidia or cpu", env="ACCELERATOR", default="nvidia")
    training_image: str = setting("image of the training workloads", parse_image, "an image reference",
                                  env="TRAINING_IMAGE", flags=("bertTrainingImage", "pytorchImage"),
                                  default="kubetest2-training/workloads:latest")
    nccl_tests_image: str = setting("image with nccl-tests and OpenMPI", parse_image, "an image reference",
                                    env="NCCL_TESTS_IMAGE", flags=("nvidiaTestImage",),
                                    default="kubetest2-training/nccl-tests:latest")
    launcher: str = setting("torchrun (Indexed Job + headless Service) or mpi (MPIJob)",
                            choice("torchrun", "mpi"), "torchrun or mpi", env="LAUNCHER", default="torchrun")
    workload_size: str | None = setting("model size of the training workloads; unset: tiny on cpu, base on "
                                        "nvidia", choice("tiny", "base", "large"), "tiny, base or large",
                                        env="WORKLOAD_SIZE")
    job_timeout: float = setting("how long each test waits for its job (Go duration)", parse_duration,
                                 "a Go duration like 20m", env="JOB_TIMEOUT", default=20 * 60.0)
    discovery_timeout: float = setting("how long to wait for nodes to advertise their GPUs (Go duration)",
                                       parse_duration, "a Go duration like 5m", env="DISCOVERY_TIMEOUT",
                                       default=5 * 60.0)
    pod_failure_grace: float = setting("how long a pod may stay unschedulable or fail to pull its image "
                                       "before the test fails (Go duration)", parse_duration,
                                       "a Go duration like 2m", env="POD_FAILURE_GRACE", default=120.0)
    straggler_fraction: float = setting("a rank below this fraction of the ranks' upper quartile (probe, "
                                        "compute time, throughput) is a straggler", parse_fraction,
                                        "a number between 0 and 1",
                                        env="STRAGGLER_FRACTION", default=0.7)
    min_throughput_per_gpu: float | None = setting("fail below this many samples/s per GPU (BERT); unset: "
                                                   "the node type's table value", parse_positive_float,
                                                   "a number > 0", env="MIN_THROUGHPUT_PER_GPU")
    min_busbw: float | None = setting("fail when the bus bandwidth at the sweep's largest message is below "
                                      "0.9x this many GB/s; unset: the node type's table floor", parse_positive_float,
                                      "a number > 0", env="NCCL_TESTS_MIN_BW")
    pod_annotations: Mapping[str, str] = setting("annotations added to every workload pod (k=v,k2=v2)",
                                                 parse_key_values, "comma-separated key=value pairs",
                                                 env="POD_ANNOTATIONS", default={})
    keep_resources: bool = setting("leave the test namespace in place for debugging", parse_bool,
                                   "true or false", env="KEEP_RESOURCES", default=False)
    install_device_plugin: bool = setting("accepted for upstream compatibility: the suites never install a "
                                          "device plugin; they wait for the nodes to advertise GPUs",
                                          parse_bool, "true or false", flags=("installDevicePlugin",),
                                          is_bool_flag=True, default=False)
    kubeconfig: str | None = setting("kubeconfig of the cluster under test", parse_path, "a file path",
                                     env="KUBECONFIG", flags=("kubeconfig",))
    namespace: str | None = setting("namespace to run in; unset: a new namespace per test, deleted after "
                                    "it", parse_dns_label, "a lower-case RFC 1123 label of at most 63 "
                                    "characters", flags=("namespace",))
    artifacts: str = setting("folder for JUnit, logs and manifests", parse_path, "a folder path",
                             env="ARTIFACTS", default=DEFAULT_ARTIFACTS, default_factory=default_artifacts,
                             default_origin=f"./{DEFAULT_ARTIFACTS}")
    run_id: str = setting("id of this run, put in namespaces and labels", parse_text, "an id",
                          env="KUBETEST2_RUN_ID", default_factory=random_run_id, default_origin="random")
    # -- e2e-framework flags: accepted so upstream command lines run unchanged ------------------
    labels: str | None = setting("accepted, no effect", parse_text, "text", flags=("labels",),
                                 group=E2E_FRAMEWORK)
    skip_labels: str | None = setting("accepted, no effect", parse_text, "text", flags=("skip-labels",),
                                      group=E2E_FRAMEWORK)
    feature: str | None = setting("run only tests whose name matches this regexp", parse_regex,
                                  "a regular expression", flags=("feature",), group=E2E_FRAMEWORK)
    skip_features: str | None = setting("skip tests whose name matches this regexp", parse_regex,
                                        "a regular expression", flags=("skip-features",), group=E2E_FRAMEWORK)

    # Where each value came from, by setting name.
    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False)

    def origin(self, name: str) -> Origin:
        return self.origins[name]

    def resolved(self) -> dict[str, Resolved]:
        """The training configuration's values with their origins, in declaration order."""
        return {s.name: Resolved(getattr(self, s.name), self.origins[s.name], s)
                for s in SETTINGS if s.group == TRAINING}


SETTINGS: tuple[Setting, ...] = tuple(replace(f.metadata[_SETTING], name=f.name)
                                      for f in fields(Config) if _SETTING in f.metadata)
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
SETTINGS_BY_FLAG: dict[str, Setting] = {flag: s for s in SETTINGS for flag in s.flags}


@dataclass(frozen=True)
class Resolved:
    """A value as shown to the user: the value, where it came from, and its setting if it has one."""

    value: object
    origin: Origin
    setting: Setting | None = None

    def shown(self) -> str:
        return format_value(self.setting, self.value)


def format_value(setting: Setting | None, value: object) -> str:
    """A value as printed and stored in JUnit: Go durations, `true`/`false`, `k=v,...` redacted."""
    if value is None:
        return "<unset>"
    if setting is not None and setting.parse is parse_duration and isinstance(value, float):
        return format_duration(value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={redact(k, v)}" for k, v in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def report_lines(resolved: Mapping[str, Resolved]) -> list[str]:
    """The resolved configuration as printed at start, secrets redacted (settings only)."""
    return [f"{name:<24} = {redact(name, value.shown())!s:<40} ({value.origin})"
            for name, value in resolved.items() if value.setting is not None]


def properties(resolved: Mapping[str, Resolved]) -> dict[str, str]:
    """The resolved configuration as JUnit properties: config.<name> and config.<name>.source."""
    props: dict[str, str] = {}
    for name, value in resolved.items():
        props[f"config.{name}"] = str(redact(name, value.shown()))
        props[f"config.{name}.source"] = str(value.origin)
    return props


def _parse(setting: Setting, raw: str, spelled_as: str) -> Any:
    """Parse one raw value or raise ConfigError naming how it was spelled, the value and the type."""
    try:
        return setting.parse(raw)
    except (ValueError, re.error):
        raise ConfigError.bad_value(spelled_as, raw, setting.expected) from None


def _resolve_one(setting: Setting, flag_values: Mapping[str, tuple[str, str]],
                 env: Mapping[str, str]) -> tuple[Any, Origin]:
    """flag > env > default, for one setting."""
    if setting.name in flag_values:
        raw, spelled = flag_values[setting.name]
        return _parse(setting, raw, spelled), Origin(Source.FLAG, spelled)
    if setting.env and env.get(setting.env, "") != "":
        return _parse(setting, env[setting.env], setting.env), Origin(Source.ENV, setting.env)
    return setting.default_value(), Origin(Source.DEFAULT, setting.default_origin)


def resolve(flag_values: Mapping[str, tuple[str, str]], environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting: flag > env > default. What stays unset is for discovery.

    flag_values maps a setting name to (raw value, flag as spelled). All errors are collected and
    raised together so one run shows every bad setting.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    problems: list[str] = []
    for s in SETTINGS:
        try:
            values[s.name], origins[s.name] = _resolve_one(s, flag_values, env)
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))
    return Config(**values, origins=origins)


# Read by the harness, not forwarded: nccl-tests (and workloads.allreduce) would judge it on the
# `# Avg bus bandwidth` of the whole sweep and exit 1 on a healthy cluster; the harness judges it at
# the sweep's largest message (harness/bandwidth.py).
NOT_FORWARDED = frozenset({"NCCL_TESTS_MIN_BW"})


def pod_environment_passthrough() -> dict[str, str]:
    """NCCL_*/FI_* variables of the caller, forwarded to workload pods (tuning knobs users set)."""
    return {k: v for k, v in os.environ.items()
            if k.startswith(("NCCL_", "FI_")) and not looks_secret(k) and k not in NOT_FORWARDED}


def fallback_artifacts() -> Path:
    """Where to write JUnit when the configuration itself could not be resolved."""
    return Path(os.environ.get("ARTIFACTS") or DEFAULT_ARTIFACTS).absolute()
