"""Parsers of setting values: each takes the raw text and returns the value or raises ValueError.

The caller (harness.config.settings) turns a ValueError into a ConfigError naming the setting, the value
and what was expected. Every parser declares its return type: Config's fields are checked against
them (tests/unit/harness/config/test_config.py).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

import durationpy

# Go's time.ParseDuration grammar; durationpy also takes d, w, mm, y and text between the parts,
# which Go's flag package refuses.
_GO_DURATION = re.compile(r"(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")


def parse_duration(text: str) -> float:
    """A Go duration (`60m`, `1h30m`, `2.5s`, `0`) in seconds; negative ones are refused."""
    raw = text.strip()
    if raw != "0" and not _GO_DURATION.fullmatch(raw):
        raise ValueError(text)
    return float(durationpy.from_str(raw).total_seconds())


def format_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration.String() prints them: `1h0m0s`, `20m0s`, `8s`, `1.5s`, `500ms`."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        for unit, scale in (("ms", 1e3), ("\u00b5s", 1e6), ("ns", 1e9)):
            if abs(seconds) * scale >= 1 or unit == "ns":
                return f"{_trimmed(seconds * scale)}{unit}"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{int(hours)}h{int(minutes)}m{_trimmed(secs)}s"
    if minutes:
        return f"{int(minutes)}m{_trimmed(secs)}s"
    return f"{_trimmed(secs)}s"


def _trimmed(value: float) -> str:
    """A number as Go prints a duration's last unit: up to 9 decimals, trailing zeros dropped."""
    return f"{value:.9f}".rstrip("0").rstrip(".")


def parse_bool(text: str) -> bool:
    """A boolean the way Go's strconv.ParseBool reads one."""
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


def parse_replicas(text: str) -> int:
    """A whole number >= 2: how many times a shared GPU is advertised (1 would share nothing)."""
    value = int(text.strip(), 10)
    if value < 2:
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
    """A number > 0."""
    value = float(text)
    if value <= 0:
        raise ValueError(text)
    return value


def parse_shuffle(text: str) -> str:
    """Go's -test.shuffle: `off`, `on` (a seed from the clock) or a seed (an integer)."""
    if text in ("off", "on"):
        return text
    return str(int(text.strip(), 10))


def parse_label_filter(text: str) -> dict[str, tuple[str, ...]]:
    """e2e-framework's --labels: `k=v,k2=v2`, each pair exactly one `=`, a key may repeat."""
    labels: dict[str, tuple[str, ...]] = {}
    for item in text.split(","):
        parts = item.split("=")
        if len(parts) != 2:
            raise ValueError(text)
        key, value = parts[0].strip(), parts[1].strip()
        labels[key] = (*labels.get(key, ()), value)
    return labels


def parse_dimensions(text: str) -> dict[str, str]:
    """upstream's --metricDimensions: `k=v,k2=v2` (CloudWatch dimension names, any text)."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(text)
        pairs[key] = value
    return pairs


def parse_command(text: str) -> tuple[str, ...]:
    """A command line split like a POSIX shell would (`python train.py --epochs 1`)."""
    words = tuple(shlex.split(text))
    if not words:
        raise ValueError(text)
    return words


def parse_regex(text: str) -> str:
    """A regular expression that compiles (re.error is a ValueError)."""
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
    """An image reference."""
    if not _IMAGE.fullmatch(text):
        raise ValueError(text)
    return text


def parse_image_or_empty(text: str) -> str:
    """An image reference, or "" for upstream's image flags: given empty, upstream's test fails at
    once naming the flag (harness/jobs/images.py), the run does not stop at a usage error."""
    return text if text == "" else parse_image(text)


_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # optional DNS prefix/
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def parse_key_values(text: str) -> dict[str, str]:
    """`k=v,k2=v2` with Kubernetes label/annotation keys; the empty string is an empty mapping."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not _LABEL_KEY.fullmatch(key):
            raise ValueError(text)
        pairs[key] = value
    return pairs


def parse_path(text: str) -> str:
    """A file or folder path, made absolute (`~` expanded)."""
    if not text.strip():
        raise ValueError(text)
    return os.path.abspath(os.path.expanduser(text))


def choice(*options: str) -> Callable[[str], str]:
    """A parser accepting exactly one of `options`."""

    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(text)
        return text

    return parse


def parse_text(text: str) -> str:
    """Any text."""
    return text


_BYTE_SIZE = re.compile(r"(\d{1,15})([KMGT]?)", re.IGNORECASE | re.ASCII)
_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """A message size as nccl-tests' `-e` takes it: `8`, `2G`, `16G` (K/M/G/T are powers of 1024)."""
    match = _BYTE_SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(text)
    return int(match[1]) * _BYTE_UNITS[match[2].upper()]


def format_bytes(size: float) -> str:
    """A size in the largest binary unit that divides it: `16 GiB`, `128 MiB`, `8 B`, `1.5 GiB`."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION = re.compile(r"(?P<key>[^=:,\s]+)(?:=(?P<value>[^=:,\s]*))?(?::(?P<effect>[A-Za-z]+))?")


@dataclass(frozen=True)
class Tolerations:
    """Pod tolerations given as text (TOLERATIONS): `key` (any value, any effect), `key=value` (that
    value, any effect), either with `:Effect` (only that effect), comma-separated. Kept as the pod
    spec's dicts; printed back in the same syntax."""

    items: tuple[tuple[str, str | None, str | None], ...] = ()  # (key, value or None: Exists, effect or None: any)

    def as_pod_spec(self) -> list[dict[str, str]]:
        """The tolerations as a pod spec lists them."""
        specs = []
        for key, value, effect in self.items:
            spec = {"key": key, "operator": "Exists"} if value is None else {"key": key, "operator": "Equal",
                                                                               "value": value}
            specs.append({**spec, "effect": effect} if effect else spec)
        return specs

    def __str__(self) -> str:
        return ",".join(key + ("" if value is None else f"={value}") + (f":{effect}" if effect else "")
                        for key, value, effect in self.items)


def parse_tolerations(text: str) -> Tolerations:
    """`key[=value][:Effect],...` (see Tolerations); a key must be a label key, Effect one of
    TAINT_EFFECTS; the empty string is none."""
    items = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _TOLERATION.fullmatch(item)
        if (match is None or not _LABEL_KEY.fullmatch(match["key"])
                or (match["effect"] is not None and match["effect"] not in TAINT_EFFECTS)):
            raise ValueError(f"{item!r} in {text!r}")
        items.append((match["key"], match["value"], match["effect"]))
    return Tolerations(tuple(items))
