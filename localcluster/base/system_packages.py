"""localcluster/base/system_packages.txt read from Python: which rows a part of hack/ needs, and which are missing.

The same table hack/system-packages.sh installs, so a check and the install never disagree."""

from __future__ import annotations

import shutil
from pathlib import Path

TABLE = Path(__file__).with_name("system_packages.txt")


NEEDED_BY = ("setup", "images", "real-nodes")


def table() -> list[tuple[str, str, str]]:
    """Every row: (command or file, Debian package, who needs it). ValueError naming the line for a
    row that is not three fields or names someone else (the shell installer would skip it silently)."""
    found = []
    for number, line in enumerate(TABLE.read_text().splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 3 or fields[2] not in NEEDED_BY:
            raise ValueError(f"{TABLE} line {number}: {line.strip()!r}; expected `COMMAND-OR-FILE PACKAGE "
                             f"NEEDED-BY` with NEEDED-BY one of {', '.join(NEEDED_BY)}")
        found.append((fields[0], fields[1], fields[2]))
    return found


def rows(needed_by: str) -> dict[str, str]:
    """command-or-file -> Debian package, for the rows `needed_by` (setup, images, real-nodes) needs."""
    found = {item: package for item, package, who in table() if who == needed_by}
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
