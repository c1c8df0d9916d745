"""How steady this machine's CPU is: the ceiling on any absolute speed judgement made on it.

One thread runs a fixed pure-Python loop for --seconds, counting its rate in 0.1 s slices; for
windows of 0.5 s to 30 s it prints the slowest window's rate over the median window's and over the
fastest. A speed judgement with tolerance T (BASELINE_TOLERANCE) can only hold run after run when
the slowest window of a run's length stays above T x the window the baseline was recorded in. Run
it on a quiet machine: whatever else runs shows up as noise too. One line per figure,
`name: value unit  # how`.

    .venv/bin/python bench/host_cpu_noise.py [--seconds 150]
"""

from __future__ import annotations

import argparse
import statistics
import time

SLICE_S = 0.1
WINDOWS_S = (0.5, 2.0, 5.0, 10.0, 30.0)


def loop_rates(seconds: float) -> list[float]:
    """Rounds of a fixed loop per second, one figure per SLICE_S."""
    rates = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, rounds = time.perf_counter(), 0
        while time.perf_counter() - start < SLICE_S:
            total = 0
            for i in range(20_000):
                total += i * i
            rounds += 1
        rates.append(rounds / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    args = parser.parse_args()
    rates = loop_rates(args.seconds)
    for window_s in WINDOWS_S:
        size = round(window_s / SLICE_S)
        windows = [statistics.mean(rates[i:i + size]) for i in range(0, len(rates) - size + 1, size)]
        if len(windows) < 2:
            continue
        how = f"# {len(windows)} windows of {window_s:g} s over {args.seconds:g} s, one thread"
        print(f"slowest_over_median_{window_s:g}s: {min(windows) / statistics.median(windows):.3f} ratio  {how}")
        print(f"slowest_over_fastest_{window_s:g}s: {min(windows) / max(windows):.3f} ratio  {how}")


if __name__ == "__main__":
    main()
