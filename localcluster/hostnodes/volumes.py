"""A container's file system on this machine: its `/tmp` and its volume mounts, as local folders.

Each pod has a scratch folder; its ConfigMap, Secret and emptyDir volumes are written under
`<scratch>/volumes/<volume>/` (ConfigMap and Secret files again at each container start, with
their items and modes), `/tmp` is `<scratch>/tmp`. A path the container passes in an argument or
an env value (`/etc/mpi/hostfile`, `--out=/tmp/x`) is rewritten to the local one; what a program
opens by a path it builds itself is not. Other volume kinds (hostPath, PVCs, projected) are not
mapped: their paths stay those of this machine.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.hostnodes.container_env import ContainerConfigError, PodObjects

DEFAULT_FILE_MODE = 0o644
# kind of volume source -> (object kind, field holding the object's name)
OBJECT_VOLUMES = {"configMap": ("ConfigMap", "name"), "secret": ("Secret", "secretName")}


@dataclass(frozen=True)
class PathMap:
    """Container path prefixes -> local folders; the longest prefix wins."""

    prefixes: tuple[tuple[str, Path], ...]

    def local(self, path: str) -> str | None:
        """The local path of a container path under a mapped prefix, else None."""
        for prefix, folder in sorted(self.prefixes, key=lambda p: len(p[0]), reverse=True):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return str(folder) + path[len(prefix.rstrip("/")):]
        return None

    def rewrite(self, value: str) -> str:
        """A whole value that is a mapped path, or `--flag=<mapped path>`."""
        local = self.local(value)
        if local is not None:
            return local
        flag, eq, rest = value.partition("=")
        if eq and flag.startswith("-") and (local := self.local(rest)) is not None:
            return f"{flag}={local}"
        return value


def mount_volumes(pod: dict[str, Any], spec: dict[str, Any], scratch: Path, objects: PodObjects) -> PathMap:
    """Writes the volumes the container mounts; returns its path map (its /tmp included)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    tmp = scratch / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    prefixes: list[tuple[str, Path]] = [("/tmp", tmp)]
    for mount in spec.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise ContainerConfigError(f"volumeMount {mount['name']!r}: no such volume in the pod")
        folder = write_volume(volume, scratch / "volumes" / volume["name"], objects)
        if folder is not None:
            prefixes.append((mount["mountPath"], folder / mount.get("subPath", "")))
    return PathMap(tuple(prefixes))


def write_volume(volume: dict[str, Any], folder: Path, objects: PodObjects) -> Path | None:
    """The volume's local folder, filled; None for a kind that is not mapped."""
    if "emptyDir" in volume:
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    for source_kind, (kind, name_field) in OBJECT_VOLUMES.items():
        if source_kind in volume:
            source = volume[source_kind]
            name = source.get(name_field, "")
            try:
                files = objects.files(kind, name, bool(source.get("optional")))
            except ContainerConfigError as error:
                raise ContainerConfigError(f"MountVolume.SetUp failed for volume {volume['name']!r}: {error}") from None
            write_files(folder, projected_files(source, files, f"{kind} {name}"))
            return folder
    return None


def projected_files(source: dict[str, Any], files: dict[str, bytes], what: str) -> list[tuple[str, bytes, int]]:
    """(relative path, content, mode) of each file: the `items` asked for, else every key."""
    default_mode = source.get("defaultMode", DEFAULT_FILE_MODE)
    if not source.get("items"):
        return [(key, content, default_mode) for key, content in files.items()]
    out = []
    for item in source["items"]:
        if item["key"] not in files:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"MountVolume.SetUp failed: {what} has no key {item['key']!r}")
        out.append((item["path"], files[item["key"]], item.get("mode", default_mode)))
    return out


def write_files(folder: Path, files: list[tuple[str, bytes, int]]) -> None:
    """Replaces each file atomically (a reader never sees half a file), then sets its mode."""
    folder.mkdir(parents=True, exist_ok=True)
    for relative, content, mode in files:
        target = folder / relative
        if not target.resolve().is_relative_to(folder.resolve()):
            raise ContainerConfigError(f"volume item path {relative!r} leaves the volume")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        partial.write_bytes(content)
        os.chmod(partial, mode)
        os.replace(partial, target)
