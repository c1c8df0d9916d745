"""The artifacts folder ($ARTIFACTS): checked writable before the cluster is contacted; every file
the CI uploader reads (JUnit, metadata.json) written atomically with mode 0644."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path, PurePosixPath

from harness.config.settings import Origin
from harness.errors import ConfigError

# Readable by a CI uploader running as another user (mkstemp's 0600 is not).
ARTIFACT_MODE = 0o644


def ensure_writable(folder: Path, origin: Origin) -> None:
    """Create the folder and prove a file can be written in it; else a ConfigError (exit 2) naming
    ARTIFACTS, the path and why."""
    where = f"ARTIFACTS={folder}" + (f" ({origin})" if origin.detail != "ARTIFACTS" else "")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{where}: not a folder (a file of that name exists); expected a folder the "
                          "harness can write JUnit, logs and manifests to")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{where}: cannot write there: {exc.strerror or exc}; expected a folder the "
                          "harness can write JUnit, logs and manifests to") from None


def write_atomically(path: Path, data: bytes) -> None:
    """Write the whole file or nothing (a reader never sees half of it), mode 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, ARTIFACT_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_metadata(artifacts: Path, entries: dict[str, str]) -> None:
    """Add keys to $ARTIFACTS/metadata.json (a flat object of strings) without overwriting any.

    An empty value counts as absent: kubetest2's exec tester writes "tester-version": "" (it is
    built without a version), and the version of what really ran the tests is more useful.
    """
    path = artifacts / "metadata.json"
    try:
        existing = json.loads(path.read_text())
        if not isinstance(existing, dict):
            existing = {}
    except (OSError, ValueError):
        existing = {}
    merged = dict(existing)
    for key, value in entries.items():
        if merged.get(key, "") == "":
            merged[key] = value
    if merged != existing:
        write_atomically(path, (json.dumps(merged, indent=2, sort_keys=True) + "\n").encode())


_UNSAFE_IN_FOLDER = re.compile(r"[^A-Za-z0-9_.-]")


def folder_of_test(name: str) -> PurePosixPath:
    """The folder of a test or subtest under `$ARTIFACTS/<binary>/` (docs/ARTIFACTS.md states the rule):
    each `/`-separated part of the Go-style name is one folder level; in a part, every character
    other than an ASCII letter, digit, `_`, `-` or `.` becomes `_` (upstream's
    `multi-node:all_reduce_perf` -> `multi-node_all_reduce_perf`); a part that is empty or only
    dots gets a `_` in front (never `.` or `..`). Two names can meet in one folder (`a:b`, `a_b`):
    result.json's `test` holds the exact name."""
    parts = []
    for part in name.split("/"):
        safe = _UNSAFE_IN_FOLDER.sub("_", part)
        parts.append(f"_{safe}" if safe.strip(".") == "" else safe)
    return PurePosixPath(*parts)
