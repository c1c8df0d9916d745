"""`python -m harness.verdict`: judge a run again from its logs, offline, with the suites' own checks.

A user re-judges a CI run with other thresholds, and the verdict is tested from outside. Values
the command line leaves out come from the test folder's result.json when there is one (world
size, node type, node count, the pod and node of each rank). Exit 0 pass, 1 fail, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.artifacts import folder_of_test
from harness.config.values import parse_fraction, parse_positive_float
from harness.errors import ConfigError, UnrecognisedLog
from harness.metrics.records import WorkloadMetrics, combine, scan_file
from harness.verdict import baseline
from harness.verdict.bandwidth import BaselineKey, judge_busbw
from harness.verdict.checks import Verdict
from harness.verdict.training import (
    TEST_WORKLOADS,
    WORKLOADS,
    Expectation,
    check_parse,
    judge_training,
    workload_size,
)

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# Bandwidth tests: TestNCCLTests/<single|multi>-node, upstream's TestMPIJobPytorchTraining/multi-node:<op>.
BUSBW_SUBTEST = re.compile(r"^(?P<topology>single-node|multi-node)(?::(?P<operation>\w+_perf))?$")

KNOWN_TESTS = ", ".join([*TEST_WORKLOADS, "TestNCCLTests/single-node", "TestNCCLTests/multi-node",
                         "TestMPIJobPytorchTraining/multi-node:<all_reduce_perf|all_gather_perf|alltoall_perf>"])
DESCRIPTION = f"""Judge workload logs again with the suites' checks; prints every check, exits 0 (pass),
1 (fail) or 2 (usage). PATH: log files, a test's artifacts folder (<binary>/<Test>/, with logs/ and
result.json), or a whole $ARTIFACTS folder (the test's folder is found by --test). Tests: {KNOWN_TESTS}"""


class UsageProblem(Exception):
    """The command line or its paths cannot be used (exit 2)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.verdict", description=DESCRIPTION)
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument("--test", required=True, help="the test's Go-style name, e.g. TestBertTraining")
    p.add_argument("--world-size", type=int, help="ranks the job ran (default: result.json's)")
    p.add_argument("--node-type", help="instance type whose thresholds apply (default: result.json's)")
    p.add_argument("--nodes", type=int, help="nodes the job spanned, for bandwidth floors (default: result.json's)")
    p.add_argument("--straggler-fraction", type=parse_fraction, default=0.7, help="STRAGGLER_FRACTION (0.7)")
    p.add_argument("--min-throughput-per-gpu", type=parse_positive_float, help="MIN_THROUGHPUT_PER_GPU")
    p.add_argument("--min-busbw", type=parse_positive_float, help="NCCL_TESTS_MIN_BW, GB/s")
    p.add_argument("--baseline", metavar="FILE", help="BASELINE: a cluster's own figures (written with BASELINE_OUT), "
                                                      "judged ahead of the table")
    p.add_argument("--baseline-tolerance", type=parse_fraction, default=0.9,
                   help="BASELINE_TOLERANCE: a figure below this fraction of the baseline's fails (0.9)")
    return p


@dataclass
class Inputs:
    """The logs to judge and the defaults their test folder's result.json offers."""

    logs: list[Path]
    result: dict[str, Any]


def _test_dir(path: Path, test: str) -> Path | None:
    if (path / "logs").is_dir():
        return path
    matches = [d for d in path.glob(f"*/{folder_of_test(test)}") if (d / "logs").is_dir()]
    if len(matches) > 1:
        raise UsageProblem(f"{path}: {len(matches)} folders hold {test}'s logs: {', '.join(map(str, matches))}")
    return matches[0] if matches else None


def find_inputs(paths: list[Path], test: str) -> Inputs:
    logs: list[Path] = []
    result: dict[str, Any] = {}
    for path in paths:
        if path.is_file():
            logs.append(path)
            continue
        if not path.is_dir():
            raise UsageProblem(f"{path}: no such file or folder")
        folder = _test_dir(path, test)
        if folder is None:
            raise UsageProblem(f"{path}: no logs/ folder for {test} (expected <binary>/{folder_of_test(test)}/logs)")
        logs += sorted(p for p in (folder / "logs").glob("*.log") if not p.name.endswith(".previous.log"))
        if (folder / "result.json").is_file():
            result = json.loads((folder / "result.json").read_text())
    return Inputs(logs, result)


def _config_value(result: dict[str, Any], name: str) -> str | None:
    value = ((result.get("config") or {}).get(name) or {}).get("value")
    return value if isinstance(value, str) and value not in ("", "<unset>") else None


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _locate(metrics: WorkloadMetrics, result: dict[str, Any]) -> None:
    """Each rank's pod and node from result.json, where the logs do not say."""
    saved = {r.get("rank"): r for r in (result.get("metrics") or {}).get("ranks") or [] if isinstance(r, dict)}
    for rank in metrics.ranks:
        entry = saved.get(rank.rank) or {}
        rank.pod = rank.pod or entry.get("pod") or None
        rank.node = rank.node or entry.get("node") or None


def _baseline(args: argparse.Namespace) -> baseline.Baseline | None:
    """--baseline, read (a malformed file is a usage error naming its line)."""
    return baseline.load_optional(args.baseline, args.baseline_tolerance)


def _busbw(args: argparse.Namespace, metrics: WorkloadMetrics, operation: str, nodes: int | None) -> Verdict:
    if nodes is None:
        raise UsageProblem("--nodes: how many nodes the sweep spanned (bandwidth floors depend on it); "
                           "no result.json says")
    key = BaselineKey.of(_baseline(args), metrics)
    return judge_busbw(operation, metrics.sweep, args.node_type, nodes, args.min_busbw, key)


def judge(args: argparse.Namespace, metrics: WorkloadMetrics, result: dict[str, Any]) -> Verdict:
    """The verdict for the test named by --test (the same functions the suites call)."""
    nodes = args.nodes or _whole(_config_value(result, "node_count"))
    top, _, sub = args.test.partition("/")
    if (match := BUSBW_SUBTEST.match(sub)) and top in ("TestNCCLTests", "TestMPIJobPytorchTraining"):
        verdict = Verdict([check_parse(metrics)])
        operation = match["operation"] or "all_reduce_perf"
        verdict.extend(_busbw(args, metrics, operation, 1 if match["topology"] == "single-node" else nodes))
        return verdict
    if args.test not in TEST_WORKLOADS:
        raise UsageProblem(f"--test={args.test}: not a test this tool judges; expected one of: {KNOWN_TESTS}")
    world_size = args.world_size or (result.get("metrics") or {}).get("world_size")
    if not isinstance(world_size, int) or world_size < 1:
        raise UsageProblem("--world-size: how many ranks the job ran (no result.json says)")
    spec = WORKLOADS[TEST_WORKLOADS[args.test]]
    judged_by = _baseline(args)
    verdict = judge_training(metrics, Expectation(args.test, spec, world_size, args.node_type,
                                                  args.straggler_fraction, args.min_throughput_per_gpu,
                                                  _config_value(result, "accelerator"),
                                                  _whole(_config_value(result, "gpus_per_node")),
                                                  baseline=judged_by))
    if judged_by is not None:
        verdict.extend(baseline.judge_nodes(metrics, judged_by, args.node_type, workload_size(metrics)))
    if spec.workload == "allreduce":
        verdict.extend(_busbw(args, metrics, "allreduce", nodes))
    return verdict


def report(args: argparse.Namespace, inputs: Inputs, verdict: Verdict, metrics: WorkloadMetrics) -> int:
    print(f"harness.verdict: {args.test} from {len(inputs.logs)} logs ({metrics.source_format}: {metrics.workload}), "
          f"node type {args.node_type or 'not given'}")
    for note in metrics.notes:
        print(f"note: {note}")
    for line in verdict.lines():
        print(line)
    if verdict.passed:
        print(f"PASS: {verdict.summary()}")
        return EXIT_PASS
    print(f"FAIL: {verdict.failures[0].message}")
    return EXIT_FAIL


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)  # exits 2 on a malformed command line
    try:
        inputs = find_inputs(args.paths, args.test)
        if not inputs.logs:
            raise UsageProblem("no log files to judge")
        args.node_type = args.node_type or _config_value(inputs.result, "node_type")
        metrics = combine([scan_file(path) for path in inputs.logs])
        _locate(metrics, inputs.result)
        verdict = judge(args, metrics, inputs.result)
    except (UsageProblem, ConfigError, OSError, ValueError) as exc:
        print(f"harness.verdict: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except UnrecognisedLog as exc:
        print(f"harness.verdict: {exc}", file=sys.stderr)
        print("FAIL: no metrics in the logs")
        return EXIT_FAIL
    return report(args, inputs, verdict, metrics)
