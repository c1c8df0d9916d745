"""Bus bandwidth judged as nccl-tests' users judge it: on the table, at the sweep's largest message.

The judged row is the one of the largest message size in the sweep (small messages measure
latency, not bandwidth); its out-of-place and in-place bus bandwidth must each reach 0.9 x the
floor (nccl-tests' own tolerance) for the node type, topology (single node over NVLink, multi-node
over the network, per node count where the table says so) and collective, from
harness/verdict/thresholds.yaml, or NCCL_TESTS_MIN_BW when set; ahead of the table, a cluster's own
baseline (BASELINE: the bus bandwidth a healthy run reached at the same largest message, x
BASELINE_TOLERANCE) for the workloads that write one (workloads.allreduce). The sweep must reach the size the floor
was measured at, else the check fails saying so. A type without a floor is not judged ("none until
measured"). Every row's `#wrong` and the out-of-bounds count must be 0. The `# Avg bus bandwidth`
line (a mean over every size from 8 B) is reported, never judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.config.values import format_bytes
from harness.metrics.log_lines import SweepRow
from harness.metrics.records import Sweep, WorkloadMetrics
from harness.verdict.baseline import BASELINE_SOURCE, Baseline
from harness.verdict.checks import Check, Verdict, declare
from harness.verdict.thresholds import (
    BUSBW_TOLERANCE,
    MULTI_NODE,
    NONE_UNTIL_MEASURED,
    SINGLE_NODE,
    Floor,
    busbw_floor,
    source_text,
)
from harness.verdict.thresholds import (
    node_type as node_type_row,
)
from harness.verdict.training import workload_size

BUSBW_TABLE = declare(
    "busbw.table",
    "the logs hold no nccl-tests table rows, a row has `#wrong` values, or values are out of bounds",
)
BUSBW_FLOOR = declare(
    "busbw.floor",
    "the bus bandwidth of the sweep's largest message (out-of-place and in-place) is below 0.9 x the floor for the "
    "node type, topology (single-node, multi-node, node count) and collective, or the sweep stops short of the size "
    "the floor was measured at; not applicable where the node type has no floor (`none until measured`)",
    "`NCCL_TESTS_MIN_BW`, else (workloads.allreduce only) `BASELINE` x `BASELINE_TOLERANCE` at the same size, else "
    "the table (Bus bandwidth floors, docs/TESTS.md)",
    settings=("NCCL_TESTS_MIN_BW", "BASELINE", "BASELINE_TOLERANCE", "NODE_TYPE"),
)

# nccl-tests binaries (and our workloads.allreduce) -> the collective the table's floors are keyed by.
COLLECTIVES = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "alltoall_perf": "alltoall",
               "reduce_scatter_perf": "reduce_scatter", "allreduce": "all_reduce"}


def collective_of(operation: str) -> str:
    name = operation.rsplit("/", 1)[-1]
    return COLLECTIVES.get(name, name.removesuffix("_perf"))


def topology_of(nodes: int) -> str:
    return SINGLE_NODE if nodes == 1 else MULTI_NODE


def sweep_max_bytes(node_type: str | None, nodes: int, operation: str) -> str | None:
    """How far a sweep must go for the node type's floors (the largest size they were measured at),
    as nccl-tests' `-e` takes it (`16G`); None when the type has no floor for this topology and
    collective."""
    _, listed = busbw_floor(node_type, topology_of(nodes), collective_of(operation), nodes, None)
    size = max((floor.size_bytes for floor in listed), default=None)
    if size is None:
        return None
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def check_table(sweep: Sweep | None) -> Check:
    """Rows were printed, every `#wrong` is 0 and no value was out of bounds (wrong results)."""
    if sweep is None or not sweep.rows:
        return BUSBW_TABLE.failed("bandwidth: no nccl-tests table rows in the logs (expected "
                                           "'size count type redop root time algbw busbw #wrong ...' lines)")
    wrong = [f"size {format_bytes(row.size)}: {half.wrong} wrong {label}"
             for row in sweep.rows for label, half in (("out-of-place", row.out_of_place), ("in-place", row.in_place))
             if half is not None and half.wrong]
    if wrong:
        return BUSBW_TABLE.failed("bandwidth: wrong results: " + "; ".join(wrong[:4]))
    if sweep.out_of_bounds:
        return BUSBW_TABLE.failed(f"bandwidth: {sweep.out_of_bounds} out-of-bounds values (wrong results)")
    return BUSBW_TABLE.passed(f"{len(sweep.rows)} sizes up to {format_bytes(sweep.max_size or 0)}, "
                                       "no wrong values")


def _floor_for(operation: str, sweep: Sweep, node_type: str | None, nodes: int, override: float | None,
               baseline: BaselineKey | None) -> tuple[Floor | None, str]:
    """The floor to judge against and, when there is none, why (a not-applicable or failing reason):
    NCCL_TESTS_MIN_BW, else the baseline, else the table."""
    if override is not None:
        return Floor(override, 0, "NCCL_TESTS_MIN_BW"), ""
    baseline_why = ""
    if baseline is not None:
        floor, baseline_why = baseline.baseline.busbw_floor(node_type, baseline.workload, baseline.size,
                                                            sweep.max_size)
        if floor is not None:
            return floor, ""
        baseline_why = f"; {baseline_why}"
    where = f"{node_type or 'this node type'} {topology_of(nodes)} {collective_of(operation)}"
    if nodes > 1:
        where += f" on {nodes} nodes"
    floor, listed = busbw_floor(node_type, topology_of(nodes), collective_of(operation), nodes, sweep.max_size)
    if not listed:
        why = node_type_row(node_type).busbw_none.get(topology_of(nodes), NONE_UNTIL_MEASURED)
        return None, f"no floor for {where} ({why}){baseline_why}"
    if floor is None:
        requested = sweep.requested_max_bytes
        asked = f" (the header asked for {format_bytes(requested)})" if requested else ""
        return None, (f"bandwidth: the sweep's largest message is {format_bytes(sweep.max_size or 0)}{asked}, but the "
                      f"{where} floor is measured at {format_bytes(listed[0].size_bytes)}: run the sweep to at least "
                      f"that size")
    return floor, ""


def _judged(row: SweepRow) -> list[tuple[str, float]]:
    halves = [("out-of-place", row.out_of_place.busbw)]
    if row.in_place is not None:
        halves.append(("in-place", row.in_place.busbw))
    return halves


def check_floor(operation: str, sweep: Sweep, node_type: str | None, nodes: int, override: float | None,
                baseline: BaselineKey | None = None) -> tuple[Check, Floor | None]:
    """The largest size's row against the floor (module docstring)."""
    floor, reason = _floor_for(operation, sweep, node_type, nodes, override, baseline)
    if floor is None:
        return (BUSBW_FLOOR.failed(reason) if reason.startswith("bandwidth:")
                else BUSBW_FLOOR.not_applicable(reason)), None
    row = max(sweep.rows, key=lambda r: r.size)
    from_baseline = baseline is not None and floor.source.startswith(BASELINE_SOURCE)
    tolerance = baseline.baseline.tolerance if baseline is not None and from_baseline else BUSBW_TOLERANCE
    expected = tolerance * floor.gbps
    halves = _judged(row)
    measured = ", ".join(f"{gbps:.2f} GB/s {label}" for label, gbps in halves)
    if floor.source == "NCCL_TESTS_MIN_BW":
        origin = f"{tolerance:g} x {floor.gbps:g} from NCCL_TESTS_MIN_BW"
    elif from_baseline:
        origin = (f"BASELINE_TOLERANCE {tolerance:g} x {floor.gbps:g} GB/s, this cluster's own figure at "
                  f"{format_bytes(floor.size_bytes)} in the {floor.source}")
    else:
        origin = (f"{tolerance:g} x {floor.gbps:g} GB/s, the {node_type} {topology_of(nodes)} "
                  f"{collective_of(operation)} floor measured at {format_bytes(floor.size_bytes)}; "
                  f"source {floor.source} in harness/verdict/thresholds.yaml")
    lowest = min(gbps for _, gbps in halves)
    message = (f"bus bandwidth at {format_bytes(row.size)} (the sweep's largest message): {measured}, expected "
               f">= {expected:.2f} GB/s (margin {lowest / expected:.2f}x; {origin})")
    if lowest < expected:
        return BUSBW_FLOOR.failed(f"threshold: {message}", measured=lowest, expected=expected,
                            unit="GB/s", threshold=True), floor
    return BUSBW_FLOOR.passed(message, measured=lowest, expected=expected, unit="GB/s"), floor


@dataclass(frozen=True)
class BaselineKey:
    """A baseline (BASELINE) and the entry a sweep compares with: its workload and size."""

    baseline: Baseline
    workload: str
    size: str | None

    @classmethod
    def of(cls, judged_by: Baseline | None, metrics: WorkloadMetrics) -> BaselineKey | None:
        """The entry `metrics`' sweep compares with in `judged_by` (its workload at the size every rank
        reported); None without a baseline."""
        return cls(judged_by, metrics.workload, workload_size(metrics)) if judged_by is not None else None


# What judge_busbw judges, in its order.
BUSBW_KINDS = (BUSBW_TABLE, BUSBW_FLOOR)


def judge_busbw(operation: str, sweep: Sweep | None, node_type: str | None, nodes: int,
                override: float | None = None, baseline: BaselineKey | None = None) -> Verdict:
    """The bandwidth verdict of one sweep: `operation` (all_reduce_perf, all_gather_perf,
    alltoall_perf, or workloads.allreduce's `allreduce`), its table, the node type and how many nodes
    it spanned; `override` is NCCL_TESTS_MIN_BW, `baseline` the cluster's own figures. Checks
    busbw.table and busbw.floor; the report's busbw section is in `verdict.references["busbw"]`."""
    verdict = Verdict()
    verdict.add(check_table(sweep))
    floor = None
    if sweep is not None and sweep.rows:
        check, floor = check_floor(operation, sweep, node_type, nodes, override, baseline)
        verdict.add(check)
    verdict.references["busbw"] = busbw_section(operation, sweep, floor)
    return verdict


def busbw_section(operation: str, sweep: Sweep | None, floor: Floor | None) -> dict[str, Any]:
    """result.json's metrics.busbw (docs/ARTIFACTS.md)."""
    rows = sweep.rows if sweep is not None else []
    return {
        "operation": operation,
        "rows": [{"size": r.size, "out_of_place_gbps": r.out_of_place.busbw,
                  "in_place_gbps": r.in_place.busbw if r.in_place else None} for r in rows],
        "floor_gbps": floor.gbps if floor else None,
        "floor_source": (floor.source if floor.source == "NCCL_TESTS_MIN_BW" or floor.source.startswith(BASELINE_SOURCE)
                         else source_text(floor.source)) if floor else "",
        "judged_sizes": [max(r.size for r in rows)] if rows and floor else [],
        "average_gbps": sweep.average if sweep is not None else None,
    }
