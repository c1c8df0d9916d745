"""The slowest tests of one or more runs, from the files tests/tiers.py appends to (KT2T_DURATIONS_FILE).

    python3 tests/durations.py [--top N] FILE...

Prints the N slowest tests (setup + call + teardown) and, when a run was cut short, the test each
file was in when it stopped (started, never finished). Standard library only: `.ci/run` calls it
after killing a run that went past its limit, when pytest could no longer print `--durations`.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def read(path: Path) -> tuple[dict[str, float], str | None]:
    """Each test's total seconds in one file, and the test that started last without a teardown."""
    totals: dict[str, float] = defaultdict(float)
    running: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t", 2)
        if len(fields) != 3:
            raise ValueError(f"{path}:{number}: expected 'seconds<TAB>phase<TAB>node id', got {line!r}")
        seconds, phase, nodeid = fields
        if seconds == "start":
            running = nodeid
            continue
        totals[nodeid] += float(seconds)
        if phase == "teardown" and nodeid == running:
            running = None
    return dict(totals), running


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    totals: dict[str, float] = {}
    for path in args.files:
        if not path.is_file():
            print(f"durations: {path}: no such file (the run recorded no test)", file=sys.stderr)
            continue
        file_totals, running = read(path)
        totals.update(file_totals)
        if running:
            print(f"still running when {path.name} ended: {running}")
    print(f"{min(args.top, len(totals))} slowest of {len(totals)} tests ({sum(totals.values()) / 60:.1f} min in all):")
    for nodeid, seconds in sorted(totals.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{seconds:9.1f}s  {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
