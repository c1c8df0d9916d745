"""Redaction: values whose names look secret are never printed, stored in JUnit or saved."""

from __future__ import annotations

import re
from typing import Any

_SECRET_WORDS = re.compile(r"token|passw|secret|key|credential", re.IGNORECASE)
REDACTED = "<redacted>"


def looks_secret(name: str) -> bool:
    """Names of settings, keys or env vars whose values are never printed or stored."""
    return bool(_SECRET_WORDS.search(name))


def redact(name: str, value: object) -> object:
    """`value`, or `<redacted>` when `name` looks secret and the value is not empty."""
    return REDACTED if looks_secret(name) and value not in (None, "") else value


def redact_secrets(obj: Any) -> Any:
    """A copy of an object with the values of secret-looking env vars and keys replaced.

    Applied to everything saved or printed: rendered manifests, objects dumped on failure.
    """
    if isinstance(obj, list):
        return [redact_secrets(item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    if isinstance(obj.get("name"), str) and "value" in obj and looks_secret(obj["name"]):
        return {**obj, "value": REDACTED}
    # A field named exactly `key` is Kubernetes naming something (a toleration's taint, a selector's
    # label, a Secret's or ConfigMap's entry), never a secret itself.
    return {k: redact(k, v) if isinstance(v, str) and k != "key" else redact_secrets(v) for k, v in obj.items()}
