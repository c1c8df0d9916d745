"""What TestNodePairs' planning and judging cost (harness/verdict/node_pairs.py, pure functions) from
4 up to 1,000 nodes, with one node slowed: `name: value unit` lines (bench/bench_common.emit).

    PYTHONPATH=. .venv/bin/python bench/node_pairs.py [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import emit

from harness.verdict.node_pairs import judge, plan

SIZES = (4, 5, 16, 64, 256, 1000, 1001)


def figures_for(the_plan, slow: str, rng: random.Random):
    """A healthy group measures 40-44 GB/s; a group holding the slow node 60% of that."""
    return [{g: rng.uniform(40, 44) * (0.6 if slow in g else 1.0) for g in groups} for groups in the_plan.passes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="timings per size (the median is printed)")
    args = parser.parse_args()
    rng = random.Random(25)
    for n in SIZES:
        nodes = [f"node-{i:04d}" for i in range(n)]
        slow = nodes[n // 3]
        plan_ms, judge_ms = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            the_plan = plan(nodes)
            plan_ms.append((time.perf_counter() - started) * 1e3)
            figures = figures_for(the_plan, slow, rng)
            started = time.perf_counter()
            results = judge(the_plan, figures, 0.8)
            judge_ms.append((time.perf_counter() - started) * 1e3)
        failed = [r.node for r in results if r.failed]
        emit(f"plan.{n}_nodes", statistics.median(plan_ms), "ms", f"median of {args.repeat}")
        emit(f"judge.{n}_nodes", statistics.median(judge_ms), "ms", f"median of {args.repeat}")
        emit(f"failed.{n}_nodes", ",".join(failed) or "none", "",
             f"slowed {slow}; groups per pass {len(the_plan.passes[0])}/{len(the_plan.passes[1])}; "
             f"inseparable pairs {len(the_plan.inseparable)}")


if __name__ == "__main__":
    main()
