"""The verdict of a training test: named checks that fail closed; `python -m harness.verdict` re-judges
logs offline with the same code the suites run.

A check that cannot be made is a failure with its reason, never a silent skip: missing or
non-finite loss, throughput or bandwidth; a parsed workload other than the test's; ranks outside
0..world_size-1, missing, empty or reporting another world size (duplicates are parse problems);
diverged params_checksum; fewer steps than requested; malformed values. A check is
not-applicable only where it truly does not apply: no threshold for the node type ("none until
measured"), one rank (no straggler to compare), a log format that carries no such value
(upstream BERT prints no loss).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.metrics.records import FORMAT_BERT, FORMAT_KT2T, RankMetrics, WorkloadMetrics
from harness.verdict.baseline import Baseline
from harness.verdict.checks import Check, Verdict, declare
from harness.verdict.stragglers import STRAGGLER, Compared, fmt, judge_stragglers, rank_ranges, where
from harness.verdict.thresholds import NONE_UNTIL_MEASURED, ThroughputFloor, minimum_throughput, throughput_floor

PARSE = declare(
    "parse",
    "a value in the logs is malformed (`file:line`, the text, what was expected), or one rank reported twice with "
    "different values",
)
WORKLOAD = declare(
    "workload",
    "the logs are another workload's (canned BERT logs under `TestNanoGPTTraining`)",
)
RANKS = declare(
    "ranks",
    "a rank of `0..world_size-1` reported nothing, a rank outside it reported, a rank reported no values or another "
    "world size",
)
STEPS = declare(
    "steps",
    "a rank completed fewer steps than it was asked for, or did not say (not applicable: a log format without step "
    "counts)",
)
THROUGHPUT = declare(
    "throughput",
    "a rank's throughput key (`throughput`, `tokens_per_s`, `samples_per_s`, `busbw_avg`) is missing or NaN/inf, or "
    "no rank reported it",
)
LOSS = declare(
    "loss",
    "a rank's loss did not fall (mean of the last quarter of its steps not below the first quarter's; first and last "
    "loss without a step series) or is NaN/inf anywhere (not applicable: upstream's BERT log, which prints no loss)",
)
REPLICAS = declare(
    "replicas",
    "`params_checksum` differs between ranks (DDP did not keep the replicas equal) or is missing (not applicable "
    "when every rank trained FSDP shards, `sharding: fsdp`: there are no replicas)",
)
DEVICE = declare(
    "device",
    "a rank trained on another device than `cuda:<local_rank>` with nccl when `ACCELERATOR=nvidia` (not applicable "
    "on CPU)",
    "`ACCELERATOR`",
    settings=("ACCELERATOR",),
)
GPUS = declare(
    "gpus",
    "a rank saw fewer GPUs than its local world size (not applicable on CPU)",
    "`GPUS_PER_NODE`, discovery",
    settings=("GPUS_PER_NODE", "ACCELERATOR"),
)
THROUGHPUT_MINIMUM = declare(
    "throughput_minimum",
    "a rank is below the throughput floor; the message gives the floor's origin and the margin (lowest rank / "
    "floor); a combination with no floor is not applicable and says why",
    "`MIN_THROUGHPUT_PER_GPU` (BERT only), else `BASELINE` x `BASELINE_TOLERANCE`, else the table (Throughput "
    "floors, docs/TESTS.md)",
    settings=("MIN_THROUGHPUT_PER_GPU", "BASELINE", "BASELINE_TOLERANCE", "WORKLOAD_SIZE", "NODE_TYPE"),
)

MAX_LISTED = 5  # problems, ranks... named in one message


@dataclass(frozen=True)
class WorkloadSpec:
    """What a workload reports: its name in KT2T records, throughput key and unit, and whether it
    trains (loss and replica checks apply)."""

    workload: str
    throughput_key: str
    unit: str
    trains: bool = True


WORKLOADS = {
    "bert": WorkloadSpec("bert", "throughput", "samples/s"),
    "nanogpt": WorkloadSpec("nanogpt", "tokens_per_s", "tokens/s"),
    "mnist": WorkloadSpec("mnist", "samples_per_s", "samples/s"),
    "allreduce": WorkloadSpec("allreduce", "busbw_avg", "GB/s", trains=False),
}
FORMAT_NAMES = {FORMAT_KT2T: "KT2T_METRICS records", FORMAT_BERT: "upstream BERT 'Process N' lines",
                "nanogpt-iter": "nanoGPT 'iter N' lines", "nccl-tests": "an nccl-tests table", "none": "no format"}


@dataclass(frozen=True)
class Expectation:
    """What a run of one test should show: its workload, world size, node type and thresholds."""

    test: str
    spec: WorkloadSpec
    world_size: int
    node_type: str | None = None  # None: no node type's thresholds apply
    straggler_fraction: float = 0.7
    min_throughput_per_gpu: float | None = None  # MIN_THROUGHPUT_PER_GPU
    accelerator: str | None = None  # ACCELERATOR; None: not known (the device checks do not apply)
    processes_per_node: int | None = None  # what the harness launched on every node (gpus_per_node)
    baseline: Baseline | None = None  # BASELINE: this cluster's own figures, judged ahead of the table


def check_parse(metrics: WorkloadMetrics) -> Check:
    """Every value in the logs was well-formed (and no rank reported twice with different values)."""
    notes = f"; notes: {' '.join(metrics.notes[:2])}" if metrics.notes else ""
    if not metrics.problems:
        return PARSE.passed(f"no malformed values in {FORMAT_NAMES.get(metrics.source_format, '?')}{notes}")
    shown = "; ".join(str(p) for p in metrics.problems[:3])
    count = max(metrics.problem_count, len(metrics.problems))
    more = f" (and {count - 3} more)" if count > 3 else ""
    return PARSE.failed(f"parse: {count} malformed values in the logs: {shown}{more}")


def check_workload(metrics: WorkloadMetrics, expect: Expectation) -> Check:
    if metrics.workload == expect.spec.workload:
        return WORKLOAD.passed(f"the logs are {expect.spec.workload}'s")
    return WORKLOAD.failed(f"workload: the logs hold {metrics.workload} metrics "
                                    f"({FORMAT_NAMES.get(metrics.source_format, metrics.source_format)}), but "
                                    f"{expect.test} runs {expect.spec.workload}: a foreign or wrong workload's logs")


# A rank's identity, not a measurement: a record of only these reported nothing.
IDENTITY_KEYS = frozenset({"world_size", "local_rank", "restart_count", "steps_requested"})


def _has_values(rank: RankMetrics) -> bool:
    return any(isinstance(v, int | float) and not isinstance(v, bool)
               for k, v in rank.values.items() if k not in IDENTITY_KEYS)


def check_ranks(metrics: WorkloadMetrics, world_size: int) -> Check:
    """Every rank 0..world_size-1 reported values, none outside, each for this world size."""
    reported = {r.rank for r in metrics.ranks}
    problems = []
    if missing := sorted(set(range(world_size)) - reported):
        problems.append(f"{len(missing)} of {world_size} ranks reported nothing: ranks {rank_ranges(missing)}")
    if outside := sorted(reported - set(range(world_size))):
        problems.append(f"ranks outside 0..{world_size - 1} reported: {rank_ranges(outside)}")
    if empty := [r.rank for r in metrics.ranks if not _has_values(r)]:
        problems.append(f"ranks with no values: {rank_ranges(empty)}")
    other = [f"rank {r.rank} ({r.values['world_size']})" for r in metrics.ranks
             if "world_size" in r.values and r.values["world_size"] != world_size]
    if other:
        problems.append(f"ranks reporting another world size than {world_size}: {', '.join(other[:MAX_LISTED])}")
    if problems:
        notes = f" ({metrics.notes[0]})" if missing and metrics.notes else ""
        return RANKS.failed("metrics: " + "; ".join(problems) + notes)
    return RANKS.passed(f"all {world_size} ranks reported once")


def _number(rank: RankMetrics, key: str) -> float | None:
    value = rank.values.get(key)
    if key in rank.nonfinite or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _missing(rank: RankMetrics, key: str) -> str:
    if key in rank.nonfinite:
        return f"{key} is NaN/inf on {where(rank)}"
    return f"{where(rank)} reported no {key}"


def check_steps(metrics: WorkloadMetrics) -> Check:
    """Every rank completed the steps it was asked for."""
    if metrics.source_format != FORMAT_KT2T:
        return STEPS.not_applicable(f"{FORMAT_NAMES[metrics.source_format]} carry no step counts")
    short = []
    for rank in metrics.ranks:
        requested, completed = _number(rank, "steps_requested"), _number(rank, "steps_completed")
        if requested is None or completed is None:
            short.append(_missing(rank, "steps_requested" if requested is None else "steps_completed"))
        elif completed < requested:
            short.append(f"{where(rank)} completed {completed:.0f} of {requested:.0f} steps")
    if short:
        return STEPS.failed("steps: " + "; ".join(short[:MAX_LISTED]))
    return STEPS.passed("every rank completed the steps it was asked for")


def check_throughput(metrics: WorkloadMetrics, spec: WorkloadSpec) -> Check:
    """Every rank reported a finite throughput under the workload's key."""
    key = spec.throughput_key
    missing = [_missing(r, key) for r in metrics.ranks if _number(r, key) is None]
    if missing:
        return THROUGHPUT.failed("throughput: " + "; ".join(missing[:MAX_LISTED]))
    values = [_number(r, key) or 0.0 for r in metrics.ranks]
    if not values:
        return THROUGHPUT.failed(f"throughput: no rank reported {key}")
    return THROUGHPUT.passed(f"{key} from all {len(values)} ranks, median {fmt(statistics.median(values))} "
                                      f"{spec.unit}")


def _loss_problem(rank: RankMetrics) -> str | None:
    """Why this rank's loss did not decrease (or cannot be judged), None when it did."""
    series = rank.steps
    if len(series) >= 2:
        if bad := [step for step, loss in series if loss is None]:
            return f"loss is NaN/inf on {where(rank)} at step {bad[0]}"
        quarter = max(1, len(series) // 4)
        first = statistics.fmean(loss or 0.0 for _, loss in series[:quarter])
        last = statistics.fmean(loss or 0.0 for _, loss in series[-quarter:])
        what = f"mean of the first {quarter} steps {first:.4f}, of the last {quarter} {last:.4f}"
    else:
        first, last = _number(rank, "loss_first"), _number(rank, "loss_last")
        if first is None or last is None:
            return _missing(rank, "loss_first" if first is None else "loss_last")
        what = f"first {first:.4f}, last {last:.4f}"
    return None if last < first else f"loss did not decrease on {where(rank)}: {what}"


def check_loss(metrics: WorkloadMetrics, spec: WorkloadSpec) -> Check:
    """Each rank's loss fell: the mean of the last quarter of its steps below the first quarter's
    (first and last loss when there is no per-step series)."""
    if not spec.trains:
        return LOSS.not_applicable(f"{spec.workload} trains nothing")
    if metrics.source_format == FORMAT_BERT:
        return LOSS.not_applicable("the upstream BERT log prints no loss")
    problems = [p for r in metrics.ranks if (p := _loss_problem(r))]
    if problems:
        return LOSS.failed("metrics: " + "; ".join(problems[:MAX_LISTED]))
    return LOSS.passed(f"the loss decreased on all {len(metrics.ranks)} ranks")


def check_replicas(metrics: WorkloadMetrics, spec: WorkloadSpec) -> Check:
    """After DDP every replica holds the same parameters: equal params_checksum on every rank."""
    if not spec.trains:
        return REPLICAS.not_applicable(f"{spec.workload} trains nothing")
    if metrics.source_format != FORMAT_KT2T:
        return REPLICAS.not_applicable(f"{FORMAT_NAMES[metrics.source_format]} carry no params_checksum")
    if metrics.ranks and all(r.values.get("sharding") == "fsdp" for r in metrics.ranks):
        return REPLICAS.not_applicable("every rank trained FSDP shards (sharding: fsdp): no replicas to compare, "
                                       "params_checksum is the sum over the shards")
    if missing := [_missing(r, "params_checksum") for r in metrics.ranks if _number(r, "params_checksum") is None]:
        return REPLICAS.failed("replicas: " + "; ".join(missing[:MAX_LISTED]))
    checksums: dict[float, list[int]] = {}
    for rank in metrics.ranks:
        checksums.setdefault(float(rank.values["params_checksum"]), []).append(rank.rank)
    if len(checksums) > 1:
        groups = "; ".join(f"ranks {rank_ranges(ranks)}: {value!r}" for value, ranks in checksums.items())
        return REPLICAS.failed(f"replicas diverged (params_checksum differs, so gradients were not "
                                        f"all-reduced alike): {groups}")
    return REPLICAS.passed(f"params_checksum equal on all {len(metrics.ranks)} ranks")


GPU_ACCELERATOR = "nvidia"


def _device_problems(rank: RankMetrics) -> list[str]:
    """What is wrong with one rank's device on a GPU run: each item a kind of problem, so the
    ranks that share one are named together."""
    values, problems = rank.values, []
    local, device = values.get("local_rank"), values.get("device")
    if local is None:
        problems.append("no local_rank reported")
    elif device != f"cuda:{local}":
        problems.append(f"device {device or 'not reported'} instead of cuda:<local_rank>")
    for key, expected in (("device_requested", "cuda"), ("backend", "nccl")):
        if values.get(key) != expected:
            problems.append(f"{key} {values.get(key) or 'not reported'}, expected {expected}")
    return problems


def _grouped(by_problem: dict[str, list[RankMetrics]]) -> str:
    """`problem on ranks 0-7 (nodes a, b)` for each problem."""
    parts = []
    for problem, ranks in by_problem.items():
        nodes = sorted({r.node or "?" for r in ranks})
        pods = sorted({r.pod or "?" for r in ranks})
        shown = ", ".join(nodes[:MAX_LISTED]) + (f" and {len(nodes) - MAX_LISTED} more" if len(nodes) > MAX_LISTED
                                                 else "")
        pods_shown = ", ".join(pods[:MAX_LISTED]) + (" ..." if len(pods) > MAX_LISTED else "")
        parts.append(f"{problem} on ranks {rank_ranges(r.rank for r in ranks)} (node{'s' * (len(nodes) > 1)} "
                     f"{shown}; pod{'s' * (len(pods) > 1)} {pods_shown})")
    return "; ".join(parts)


def _gpu_checks_apply(metrics: WorkloadMetrics, expect: Expectation, name: str) -> Check | None:
    """Not-applicable with the reason when the run is not a GPU run or its logs carry no device."""
    if expect.accelerator is None:
        return Check.not_applicable(name, "the accelerator is not known (ACCELERATOR)")
    if expect.accelerator != GPU_ACCELERATOR:
        return Check.not_applicable(name, f"ACCELERATOR={expect.accelerator}: no GPU expected")
    if metrics.source_format != FORMAT_KT2T:
        return Check.not_applicable(name, f"{FORMAT_NAMES[metrics.source_format]} carry no device fields")
    return None


def check_device(metrics: WorkloadMetrics, expect: Expectation) -> Check:
    """ACCELERATOR=nvidia: every rank trained on its own GPU (device cuda:<local_rank>, asked for
    cuda, NCCL), so a node whose CUDA is broken cannot pass by training on the CPU."""
    if (skip := _gpu_checks_apply(metrics, expect, "device")) is not None:
        return skip
    by_problem: dict[str, list[RankMetrics]] = {}
    for rank in metrics.ranks:
        for problem in _device_problems(rank):
            by_problem.setdefault(problem, []).append(rank)
    if by_problem:
        return DEVICE.failed(f"device: ACCELERATOR={GPU_ACCELERATOR} but not every rank ran on its GPU "
                                      f"with NCCL: {_grouped(by_problem)}")
    return DEVICE.passed(f"all {len(metrics.ranks)} ranks on cuda:<local_rank> with nccl")


def check_gpus(metrics: WorkloadMetrics, expect: Expectation) -> Check:
    """ACCELERATOR=nvidia: every rank saw at least as many GPUs as its node runs ranks
    (gpus_visible >= local_world_size) and its gpus_per_node is what the harness launched."""
    if (skip := _gpu_checks_apply(metrics, expect, "gpus")) is not None:
        return skip
    by_problem: dict[str, list[RankMetrics]] = {}
    for rank in metrics.ranks:
        visible, local = rank.values.get("gpus_visible"), rank.values.get("local_world_size")
        per_node = rank.values.get("gpus_per_node")
        if visible is None or local is None:
            by_problem.setdefault("reported no gpus_visible or local_world_size", []).append(rank)
        elif visible < local:
            by_problem.setdefault(f"{visible} GPUs visible for {local} processes on the node", []).append(rank)
        if expect.processes_per_node is not None and per_node != expect.processes_per_node:
            by_problem.setdefault(f"gpus_per_node {per_node if per_node is not None else 'not reported'}, the "
                                  f"harness launched {expect.processes_per_node} per node", []).append(rank)
    if by_problem:
        return GPUS.failed(f"gpus: {_grouped(by_problem)}")
    per = f", gpus_per_node {expect.processes_per_node}" if expect.processes_per_node is not None else ""
    return GPUS.passed(f"every rank saw >= local_world_size GPUs{per}")
def workload_size(metrics: WorkloadMetrics) -> str | None:
    """The size every rank reported (`size`), None when none did or they disagree."""
    sizes = {r.values.get("size") for r in metrics.ranks}
    return sizes.pop() if len(sizes) == 1 and isinstance(next(iter(sizes)), str) else None


def floor_of(metrics: WorkloadMetrics, expect: Expectation) -> tuple[ThroughputFloor | None, str]:
    """The throughput floor per GPU and where it came from, in this order: the setting
    MIN_THROUGHPUT_PER_GPU (explicit user intent, BERT), the baseline file (BASELINE x
    BASELINE_TOLERANCE), the table (upstream BERT logs: the type's measured row; KT2T records: peak x
    minimum MFU / FLOPs per unit). Else (None, why none applies)."""
    workload, size = expect.spec.workload, workload_size(metrics)
    if expect.spec.workload == "bert" and expect.min_throughput_per_gpu is not None:
        return ThroughputFloor(expect.min_throughput_per_gpu, "setting", "MIN_THROUGHPUT_PER_GPU"), ""
    reasons = []
    if expect.baseline is not None:
        floor, why = expect.baseline.throughput_floor(expect.node_type, workload, size, expect.spec.throughput_key)
        if floor is not None:
            return floor, ""
        reasons.append(why)
    if metrics.source_format == FORMAT_BERT:
        figure = minimum_throughput(None, "", expect.node_type)
        if figure is not None:
            return ThroughputFloor(figure.value, "table", figure.source), ""
        reasons.append(f"no upstream BERT row for {expect.node_type or 'this node type'} ({NONE_UNTIL_MEASURED})")
    elif expect.spec.trains:
        floor, why = throughput_floor(expect.node_type, workload, size)
        if floor is not None:
            return floor, ""
        reasons.append(why)
    return None, "; ".join(reasons) or f"{workload} has no throughput floor"


def check_minimum(metrics: WorkloadMetrics, expect: Expectation, verdict: Verdict) -> Check:
    """Every rank's throughput at or above the floor (floor_of: setting, baseline or table), with the
    floor's origin and the margin (lowest rank / floor); the floor is drawn on the report's chart
    (verdict.references["minimum"])."""
    name, key, unit = "throughput_minimum", expect.spec.throughput_key, expect.spec.unit
    floor, why = floor_of(metrics, expect)
    if floor is None:
        return Check.not_applicable(name, f"no {key} floor: {why}")
    ranks = sorted((r for r in metrics.ranks if _number(r, key) is not None), key=lambda r: _number(r, key) or 0.0)
    lowest = _number(ranks[0], key) if ranks else None
    margin = lowest / floor.value if lowest is not None and floor.value > 0 else None
    verdict.references["minimum"] = {"key": key, "value": floor.value, "source": floor.derivation,
                                     "origin": floor.origin, "margin": margin}
    shown = f"margin {margin:.2f}x; " if margin is not None else ""
    if lowest is not None and lowest < floor.value:
        return Check.failed(name, f"threshold: {key} on {where(ranks[0])} is {lowest:.4g} {unit}, expected >= "
                                  f"{floor.value:.4g} {unit} ({shown}floor from the {floor.origin}: "
                                  f"{floor.derivation})", measured=lowest, expected=floor.value, unit=unit,
                            threshold=True)
    return Check.passed(name, f"every rank >= {floor.value:.4g} {unit} ({shown}floor from the {floor.origin}: "
                              f"{floor.derivation})", measured=lowest, expected=floor.value, unit=unit)


# What judge_training judges, in its order (the tests that run it declare these: docs/TESTS.md).
TRAINING_KINDS = (PARSE, WORKLOAD, RANKS, DEVICE, GPUS, STEPS, THROUGHPUT, LOSS, REPLICAS, THROUGHPUT_MINIMUM,
                  STRAGGLER)


def judge_training(metrics: WorkloadMetrics, expect: Expectation) -> Verdict:
    """Every check of a training test, in order; the first failing one is the test's message."""
    verdict = Verdict()
    verdict.add([check_parse(metrics), check_workload(metrics, expect), check_ranks(metrics, expect.world_size),
                 check_device(metrics, expect), check_gpus(metrics, expect),
                 check_steps(metrics), check_throughput(metrics, expect.spec), check_loss(metrics, expect.spec),
                 check_replicas(metrics, expect.spec), check_minimum(metrics, expect, verdict)])
    throughput = Compared(expect.spec.throughput_key, expect.spec.unit)
    verdict.extend(judge_stragglers(metrics.ranks, throughput, expect.straggler_fraction,
                                    probe_required=metrics.source_format == FORMAT_KT2T))
    return verdict


# Which workload each test of the suites runs (the re-judging CLI finds a test's expectations here).
TEST_WORKLOADS = {"TestBertTraining": "bert", "TestNanoGPTTraining": "nanogpt", "TestMNISTTraining": "mnist",
                  "TestElasticRecovery": "nanogpt", "TestNCCLAllReduce": "allreduce"}

