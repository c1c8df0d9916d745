"""A container's declared environment as the kubelet resolves it: `env` and `envFrom` (values with
`$(VAR)` expansion, fieldRef, resourceFieldRef, ConfigMap and Secret keys), and the same
expansion for `command` and `args`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from localcluster.control.api import ApiClient

LOOPBACK = "127.0.0.1"
_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ContainerConfigError(Exception):
    """The container cannot start: a missing ConfigMap/Secret key, an unknown field path."""


@dataclass(frozen=True)
class PodObjects:
    """The ConfigMaps and Secrets of the pod's namespace, read when a container starts."""

    api: ApiClient
    namespace: str

    def _get(self, kind: str, name: str, optional: bool) -> dict[str, Any]:
        obj = self.api.get_or_none(kind, name, self.namespace)
        if obj is None and not optional:
            raise ContainerConfigError(f"{kind.lower()} {name!r} not found")
        return obj or {}

    def files(self, kind: str, name: str, optional: bool) -> dict[str, bytes]:
        """A volume's files: every key's bytes (a ConfigMap's binaryData too); {} when an optional
        object is missing."""
        obj = self._get(kind, name, optional)
        if kind == "Secret":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        files = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        files.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return files

    def strings(self, kind: str, name: str, optional: bool) -> dict[str, str]:
        """Env values: a ConfigMap's data (not binaryData, as the kubelet), a Secret's decoded."""
        obj = self._get(kind, name, optional)
        data = obj.get("data") or {}
        if kind == "Secret":
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return dict(data)


def declared_env(spec: dict[str, Any], pod: dict[str, Any], objects: PodObjects) -> dict[str, str]:
    """`envFrom` then `env`, in order: `$(VAR)` refers to the variables declared before it."""
    declared: dict[str, str] = {}
    for source in spec.get("envFrom") or []:
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if key in source:
                data = objects.strings(kind, source[key]["name"], bool(source[key].get("optional")))
                declared.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for var in spec.get("env") or []:
        if "valueFrom" not in var:
            declared[var["name"]] = expand(var.get("value", ""), declared.get)
            continue
        value = value_from(var["valueFrom"], spec, pod, objects)
        if value is not None:
            declared[var["name"]] = value
    return declared


def value_from(source: dict[str, Any], spec: dict[str, Any], pod: dict[str, Any], objects: PodObjects) -> str | None:
    """One `valueFrom`; None for a missing optional key (the variable is then not set)."""
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return resource_value(spec, source["resourceFieldRef"])
    for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
        if key in source:
            ref = source[key]
            data = objects.strings(kind, ref["name"], bool(ref.get("optional")))
            if ref["key"] in data:
                return data[ref["key"]]
            if ref.get("optional"):
                return None
            raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} {objects.namespace}/{ref['name']}")
    raise ContainerConfigError(f"unsupported valueFrom {sorted(source)}")


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """The kubelet's `$(VAR)` expansion (third_party/forked/golang/expansion): `$(NAME)` becomes
    the variable's value, or stays `$(NAME)` when it is undefined; `$$` is a literal `$`; any other
    `$` stays as it is."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:  # unterminated: literal
                out.append("$(")
                i += 2
                continue
            name = text[i + 2:end]
            value = lookup(name)
            out.append(f"$({name})" if value is None else value)
            i = end + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def field_value(pod: dict[str, Any], path: str) -> str:
    """A downward-API fieldRef, as the kubelet resolves it (the Job controller injects
    JOB_COMPLETION_INDEX as metadata.annotations['batch.kubernetes.io/job-completion-index'])."""
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": LOOPBACK,
        "status.hostIPs": LOOPBACK,
        "status.podIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD_PATH.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: dict[str, Any], ref: dict[str, Any]) -> str:
    """resourceFieldRef: the container's limit (else request), in the divisor's unit; a kwok-cpu
    node's allocatable (16 cpu) when neither is set, as the kubelet uses the node's."""
    resources = container.get("resources") or {}
    name = ref.get("resource", "")
    kind, _, resource = name.partition(".")
    raw = (resources.get(kind) or {}).get(resource) or (resources.get("limits") or {}).get(resource)
    if raw is None:
        raw = "16" if resource == "cpu" else "64Gi"
    divisor = quantity(str(ref.get("divisor") or "1"))
    value = quantity(str(raw)) / (divisor or 1)
    return str(max(1, int(-(-value // 1))))  # the kubelet rounds up


def quantity(text: str) -> float:
    """A Kubernetes quantity (`500m`, `2`, `1Gi`, `1e3`) as a number."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
                "Ti": 2**40}
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


