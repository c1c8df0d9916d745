"""Every setting declared once: env name, flags, type, default, help; parsed, resolved and reported.

The flag parser (harness.cli), the usage text, the printed resolved configuration and the JUnit
properties are all generated from SETTINGS. This is the only module that reads os.environ.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from harness.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# Value parsers: each takes the raw string and returns the value or raises ValueError; the
# caller turns that into a ConfigError naming the setting, the value and `expected`.

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Parse a Go duration (`60m`, `1h30m`, `2.5s`, `0`) into seconds."""
    raw = text.strip()
    if raw == "0":
        return 0.0
    if not raw or _DURATION_PART.sub("", raw) != "":
        raise ValueError(text)
    return sum(float(num) * _DURATION_UNITS[unit] for num, unit in _DURATION_PART.findall(raw))


def format_duration(seconds: float) -> str:
    """Format seconds like Go's time.Duration.String() for whole seconds: `1h0m0s`, `20m0s`."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{seconds:g}s"


def parse_bool(text: str) -> bool:
    """Parse a boolean the way Go's strconv.ParseBool does."""
    lowered = text.strip().lower()
    if lowered in ("1", "t", "true", "yes", "y"):
        return True
    if lowered in ("0", "f", "false", "no", "n"):
        return False
    raise ValueError(text)


def parse_count(text: str) -> int:
    """A whole number >= 1."""
    value = int(text.strip(), 10)
    if value < 1:
        raise ValueError(text)
    return value


def parse_non_negative(text: str) -> int:
    """A whole number >= 0."""
    value = int(text.strip(), 10)
    if value < 0:
        raise ValueError(text)
    return value


def parse_fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(text)
    return value


def parse_positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def parse_regex(text: str) -> str:
    re.compile(text)
    return text


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def parse_dns_label(text: str) -> str:
    """A Kubernetes namespace name: RFC 1123 label, at most 63 characters."""
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        raise ValueError(text)
    return text


# An image reference: [registry[:port]/]path[:tag][@digest], lower-case path, no spaces.
_IMAGE = re.compile(
    r"(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?"
)


def parse_image(text: str) -> str:
    if not _IMAGE.fullmatch(text):
        raise ValueError(text)
    return text


_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # optional DNS prefix/
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def parse_key_values(text: str) -> dict[str, str]:
    """`k=v,k2=v2` with Kubernetes label/annotation keys; empty string is an empty mapping."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.fullmatch(key):
            raise ValueError(text)
        pairs[key] = value
    return pairs


def parse_path(text: str) -> str:
    if not text.strip():
        raise ValueError(text)
    return os.path.abspath(os.path.expanduser(text))


def choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(text)
        return text

    return parse


def parse_text(text: str) -> str:
    return text


# ---------------------------------------------------------------------------------------------


class Source(str, Enum):
    """Where a resolved value came from, printed beside it."""

    FLAG = "flag"
    ENV = "env"
    DISCOVERED = "discovered"
    DEFAULT = "default"
    DERIVED = "derived"


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
    # Go-style boolean flag: `-test.v` alone means true.
    is_bool_flag: bool = False
    # Runner flags (test.*) and e2e-framework flags are not training configuration.
    group: str = "config"
    secret: bool = False


GO_TEST = "go test flags"
E2E_FRAMEWORK = "e2e-framework flags (accepted for command-line compatibility)"

SETTINGS: tuple[Setting, ...] = (
    # -- Go testing flags -----------------------------------------------------------------------
    Setting("test_run", "run only tests (and subtests) matching this regexp, like go test",
            parse_regex, "a regular expression", flags=("test.run",), default="", group=GO_TEST),
    Setting("test_list", "list tests matching this regexp and exit without contacting the cluster",
            parse_regex, "a regular expression", flags=("test.list",), default=None, group=GO_TEST),
    Setting("test_v", "verbose: print every test's progress as it runs", parse_bool, "true or false",
            flags=("test.v",), default=False, is_bool_flag=True, group=GO_TEST),
    Setting("test_timeout", "fail every running test after this long (Go duration; 0 = none)",
            parse_duration, "a Go duration like 60m or 1h30m", flags=("test.timeout",), default=0.0,
            group=GO_TEST),
    Setting("test_failfast", "do not start new tests after the first failure", parse_bool,
            "true or false", flags=("test.failfast",), default=False, is_bool_flag=True, group=GO_TEST),
    # -- Training configuration (ARCHITECTURE "Configuration") ---------------------------------
    Setting("node_type", "instance type (node.kubernetes.io/instance-type) to run on; unset: the "
            "single type present", parse_text, "an instance type name", env="NODE_TYPE",
            flags=("nodeType",)),
    Setting("node_count", "nodes to use; unset: all discovered nodes of that type", parse_count,
            "a whole number >= 1", env="NODE_COUNT"),
    Setting("gpus_per_node", "GPUs (processes) per node; unset: the nodes' nvidia.com/gpu capacity "
            "(1 process with ACCELERATOR=cpu)", parse_non_negative, "a whole number >= 0",
            env="GPUS_PER_NODE"),
    Setting("efa_per_node", "EFA devices per node; unset: the nodes' vpc.amazonaws.com/efa capacity",
            parse_non_negative, "a whole number >= 0", env="EFA_PER_NODE"),
    Setting("efa_enabled", "require EFA (true) or use none (false); unset: use what nodes advertise",
            parse_bool, "true or false", flags=("efaEnabled",), is_bool_flag=True),
    Setting("accelerator", "nvidia (NCCL, GPU requests) or cpu (gloo, no GPU requests)",
            choice("nvidia", "cpu"), "nvidia or cpu", env="ACCELERATOR", default="nvidia"),
    Setting("training_image", "image of the training workloads", parse_image, "an image reference",
            env="TRAINING_IMAGE", flags=("bertTrainingImage", "pytorchImage"),
            default="kubetest2-training/workloads:latest"),
    Setting("nccl_tests_image", "image with nccl-tests and OpenMPI", parse_image,
            "an image reference", env="NCCL_TESTS_IMAGE", flags=("nvidiaTestImage",),
            default="kubetest2-training/nccl-tests:latest"),
    Setting("launcher", "torchrun (Indexed Job + headless Service) or mpi (MPIJob)",
            choice("torchrun", "mpi"), "torchrun or mpi", env="LAUNCHER", default="torchrun"),
    Setting("workload_size", "model size of the training workloads; unset: tiny on cpu, base on nvidia",
            choice("tiny", "base", "large"), "tiny, base or large", env="WORKLOAD_SIZE"),
    Setting("job_timeout", "how long each test waits for its job (Go duration)", parse_duration,
            "a Go duration like 20m", env="JOB_TIMEOUT", default=20 * 60.0),
    Setting("discovery_timeout", "how long to wait for nodes to advertise their GPUs (Go duration)",
            parse_duration, "a Go duration like 5m", env="DISCOVERY_TIMEOUT", default=5 * 60.0),
    Setting("pod_failure_grace", "how long a pod may stay unschedulable or fail to pull its image "
            "before the test fails (Go duration)", parse_duration, "a Go duration like 2m",
            env="POD_FAILURE_GRACE", default=120.0),
    Setting("straggler_fraction", "a rank below this fraction of the median throughput is a straggler",
            parse_fraction, "a number between 0 and 1", env="STRAGGLER_FRACTION", default=0.7),
    Setting("min_throughput_per_gpu", "fail below this many samples/s per GPU (BERT); unset: the "
            "node type's table value", parse_positive_float, "a number > 0",
            env="MIN_THROUGHPUT_PER_GPU"),
    Setting("min_busbw", "fail when the all-reduce bus bandwidth is below 0.9x this many GB/s; "
            "unset: the node type's table value", parse_positive_float, "a number > 0",
            env="NCCL_TESTS_MIN_BW"),
    Setting("pod_annotations", "annotations added to every workload pod (k=v,k2=v2)",
            parse_key_values, "comma-separated key=value pairs", env="POD_ANNOTATIONS", default={}),
    Setting("keep_resources", "leave the test namespace in place for debugging", parse_bool,
            "true or false", env="KEEP_RESOURCES", default=False),
    Setting("install_device_plugin", "accepted for upstream compatibility: the suites never install "
            "a device plugin; they wait for the nodes to advertise GPUs", parse_bool, "true or false",
            flags=("installDevicePlugin",), is_bool_flag=True, default=False),
    Setting("kubeconfig", "kubeconfig of the cluster under test", parse_path, "a file path",
            env="KUBECONFIG", flags=("kubeconfig",)),
    Setting("namespace", "namespace to run in; unset: a new namespace per test, deleted after it",
            parse_dns_label, "a lower-case RFC 1123 label of at most 63 characters",
            flags=("namespace",)),
    Setting("artifacts", "folder for JUnit, logs and manifests", parse_path, "a folder path",
            env="ARTIFACTS", default="_artifacts"),
    Setting("run_id", "id of this run, put in namespaces and labels", parse_text, "an id",
            env="KUBETEST2_RUN_ID"),
    # -- e2e-framework flags: accepted so upstream command lines run unchanged ----------------
    Setting("labels", "accepted, no effect", parse_text, "text", flags=("labels",), group=E2E_FRAMEWORK),
    Setting("skip_labels", "accepted, no effect", parse_text, "text", flags=("skip-labels",),
            group=E2E_FRAMEWORK),
    Setting("feature", "run only tests whose name matches this regexp", parse_regex,
            "a regular expression", flags=("feature",), group=E2E_FRAMEWORK),
    Setting("skip_features", "skip tests whose name matches this regexp", parse_regex,
            "a regular expression", flags=("skip-features",), group=E2E_FRAMEWORK),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
SETTINGS_BY_FLAG: dict[str, Setting] = {flag: s for s in SETTINGS for flag in s.flags}

_SECRET_WORDS = re.compile(r"token|passw|secret|key|credential", re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """Names of settings or env vars whose values are never printed or stored."""
    return bool(_SECRET_WORDS.search(name))


def redact(name: str, value: object) -> object:
    return "<redacted>" if looks_secret(name) and value not in (None, "") else value


def redact_secrets(obj: Any) -> Any:
    """A copy of an object with the values of secret-looking env vars and keys replaced.

    Applied to everything saved or printed: rendered manifests, objects dumped on failure.
    """
    if isinstance(obj, list):
        return [redact_secrets(item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    if isinstance(obj.get("name"), str) and "value" in obj and looks_secret(obj["name"]):
        return {**obj, "value": "<redacted>"}
    return {k: redact(k, v) if isinstance(v, str) else redact_secrets(v) for k, v in obj.items()}


@dataclass
class Resolved:
    """A setting's value and where it came from."""

    value: Any
    source: Source
    origin: str  # e.g. "--nodeType", "NODE_TYPE", "node capacity"


@dataclass
class Config:
    """The resolved configuration; values are read as attributes: cfg.node_count."""

    values: dict[str, Resolved] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name].value
        except KeyError:
            raise AttributeError(name) from None

    def set(self, name: str, value: Any, source: Source, origin: str) -> None:
        self.values[name] = Resolved(value, source, origin)

    def source_of(self, name: str) -> Source:
        return self.values[name].source

    def explicit(self, name: str) -> bool:
        """True when the user set it (flag or env), so discovery must not override it."""
        return self.values[name].source in (Source.FLAG, Source.ENV)

    def report_lines(self) -> list[str]:
        """The resolved configuration as printed at start, secrets redacted."""
        lines = []
        for setting in SETTINGS:
            resolved = self.values.get(setting.name)
            if setting.group != "config" or resolved is None:
                continue
            shown = format_value(setting, resolved.value)
            lines.append(f"{setting.name:<24} = {redact(setting.name, shown)!s:<40} "
                         f"({resolved.source.value}: {resolved.origin})")
        return lines

    def properties(self) -> dict[str, str]:
        """The resolved configuration as JUnit properties: config.<name> and config.<name>.source."""
        props: dict[str, str] = {}
        for name, resolved in self.values.items():
            setting = SETTINGS_BY_NAME.get(name)
            if setting is not None and setting.group != "config":
                continue
            shown = format_value(setting, resolved.value) if setting else str(resolved.value)
            props[f"config.{name}"] = str(redact(name, shown))
            props[f"config.{name}.source"] = f"{resolved.source.value}: {resolved.origin}"
        return props


def format_value(setting: Setting | None, value: Any) -> str:
    if value is None:
        return "<unset>"
    if setting is not None and setting.parse is parse_duration:
        return format_duration(value)
    if isinstance(value, dict):
        return ",".join(f"{k}={redact(k, v)}" for k, v in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_setting(setting: Setting, raw: str, spelled_as: str) -> Any:
    """Parse one raw value or raise ConfigError naming how it was spelled, the value and the type."""
    try:
        return setting.parse(raw)
    except (ValueError, re.error):
        raise ConfigError.bad_value(spelled_as, raw, setting.expected) from None


def resolve(flag_values: Mapping[str, tuple[str, str]], environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting: flag > env > default. Discovery fills the rest later.

    flag_values maps a setting name to (raw value, flag as spelled). All errors are collected and
    raised together so one run shows every bad setting.
    """
    env = os.environ if environ is None else environ
    cfg = Config()
    problems: list[str] = []
    for setting in SETTINGS:
        try:
            if setting.name in flag_values:
                raw, spelled = flag_values[setting.name]
                cfg.set(setting.name, parse_setting(setting, raw, spelled), Source.FLAG, spelled)
            elif setting.env and env.get(setting.env, "") != "":
                raw = env[setting.env]
                cfg.set(setting.name, parse_setting(setting, raw, setting.env), Source.ENV, setting.env)
            elif setting.name == "artifacts":
                cfg.set(setting.name, parse_path(setting.default), Source.DEFAULT, "./_artifacts")
            elif setting.name == "run_id":
                cfg.set(setting.name, uuid.uuid4().hex[:8], Source.DEFAULT, "random")
            else:
                cfg.set(setting.name, setting.default, Source.DEFAULT, "default")
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg


def pod_environment_passthrough() -> dict[str, str]:
    """NCCL_*/FI_* variables of the caller, forwarded to workload pods (tuning knobs users set)."""
    return {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "FI_")) and not looks_secret(k)}


def kubetest2_run_dir() -> str | None:
    return os.environ.get("KUBETEST2_RUN_DIR")
