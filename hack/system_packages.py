"""hack/system-packages.txt read from Python: which rows a part of hack/ needs, and which are missing.

The same table hack/system-packages.sh installs, so a check and the install never disagree."""

from __future__ import annotations

import shutil
from pathlib import Path

TABLE = Path(__file__).with_name("system-packages.txt")


def rows(needed_by: str) -> dict[str, str]:
    """command-or-file -> Debian package, for the rows `needed_by` (setup, images, real-nodes) needs."""
    found = {}
    for line in TABLE.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 3 and fields[2] == needed_by:
            found[fields[0]] = fields[1]
    if not found:
        raise ValueError(f"{TABLE} has no row needed by {needed_by!r}")
    return found


def present(command_or_file: str) -> bool:
    if command_or_file.startswith("/"):
        return Path(command_or_file).exists()
    return shutil.which(command_or_file) is not None


def missing_packages(needed_by: str) -> list[str]:
    """The Debian packages of `needed_by`'s missing rows, sorted, each once."""
    return sorted({package for item, package in rows(needed_by).items() if not present(item)})
