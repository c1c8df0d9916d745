"""The metrics parser on hostile logs: it must stay linear in the input's size, whatever the shape.

For each shape, a log of one line of about SIZE MB (and one of SIZE/10 MB, to show linearity) is
written to a temporary file and parsed by `harness.metrics.records.parse_files` (what the suites and
`python -m harness.metrics` run), in a fresh subprocess per file so that each figure has its own
peak memory; CPU time is compared (wall time on a shared machine is noise). Prints one line per
figure, `name: value unit  # how`; the shapes are the old regex's worst case (repeated
`KT2T_METRICS {`, 25 s at 1.1 MB before), and others that could make a scanner rescan: an
unterminated JSON string full of markers, deep nesting, endless numbers, tags and table-like rows,
and many short lines, malformed or valid.

    .venv/bin/python bench/parser_adversarial.py            # 50 MB lines (about 2 minutes here)
    .venv/bin/python bench/parser_adversarial.py --mb 5     # quicker
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MB = 1_000_000


def repeat(unit: str, prefix: str = "", suffix: str = "") -> Callable[[int], str]:
    return lambda size: prefix + unit * max(1, (size - len(prefix) - len(suffix)) // len(unit)) + suffix


SHAPES: dict[str, Callable[[int], str]] = {
    "repeated-metrics-marker": repeat("KT2T_METRICS {"),
    "unterminated-json-string-of-markers": repeat('KT2T_METRICS {\\"a\\":\\"', 'KT2T_METRICS {"k":"'),
    "deep-json-nesting": repeat("[", 'KT2T_METRICS {"a":'),
    "endless-json-number": repeat("9", 'KT2T_METRICS {"rank":'),
    "endless-throughput-number": repeat("1.", "Process 1 - Throughput: ", " samples/second"),
    "endless-mpi-tag": repeat("9", "[1,"),
    "endless-iteration-number": repeat("9", "iter ", ": loss 1.0, time 1.0ms, mfu n/a"),
    "table-like-row": repeat(" 1", "  8  2  float  sum  -1"),
    "spaces-then-a-digit": repeat(" ", "", "1"),
    "avg-bus-bandwidth-digits": repeat("9", "# Avg bus bandwidth : "),
    "many-short-malformed-lines": repeat('KT2T_METRICS {"rank":"x"}\n'),
    "many-valid-step-lines": repeat('KT2T_STEP {"rank":0,"step":1,"loss":2.5,"ms":10.0}\n'),
}

CHILD = """
import json, resource, sys, time
from pathlib import Path
from harness.metrics.records import parse_files
from harness.errors import UnrecognisedLog
start = time.perf_counter(); cpu = time.process_time()
try:
    metrics = parse_files([Path(sys.argv[1])])
    problems = len(metrics.problems)
except UnrecognisedLog:
    problems = 0
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu, "problems": problems,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50.0, help="size of the large log in MB (default 50)")
    parser.add_argument("shapes", nargs="*", choices=[[], *SHAPES], help="shapes to run (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parser-bench-") as folder:
        for name in args.shapes or SHAPES:
            figures = {}
            for size in (int(args.mb * MB / 10), int(args.mb * MB)):
                path = Path(folder) / f"{name}.log"
                path.write_text(SHAPES[name](size) + "\n")
                figures[size] = measure(path)
                path.unlink()
            small, large = figures.values()
            mb, ratio = args.mb, large["cpu"] / max(small["cpu"], 1e-3)
            print(f"{name}: {large['seconds']:.2f} s wall, {large['cpu']:.2f} s CPU for {mb:g} MB "
                  f"({mb / large['cpu']:.0f} MB/s of CPU), {large['problems']} problems, "
                  f"peak {large['peak_mib']:.0f} MiB"
                  f"  # CPU x{ratio:.1f} that of {mb / 10:g} MB ({small['cpu']:.3f} s): linear is x10", flush=True)
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"# total {time.monotonic() - started:.0f} s", file=sys.stderr)
    sys.exit(code)
