"""The node-type table (harness/verdict/thresholds.yaml): capacity, throughput floors derived from
the GPU's peak FLOP/s and a minimum MFU (or a step-time ceiling), and bus bandwidth floors, each with
its source; a type that is not listed has none ("none until measured"), and a combination the table
knows has no floor says why (throughput_floor's reason, busbw_none)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from harness.config.values import parse_bytes

# nccl-tests' own check fails below 0.9 x the expected bus bandwidth.
BUSBW_TOLERANCE = 0.9
SINGLE_NODE, MULTI_NODE = "single-node", "multi-node"
NONE_UNTIL_MEASURED = "none until measured"


class ThresholdTableError(ValueError):
    """harness/verdict/thresholds.yaml does not say what the harness expects (a packaging or editing error)."""


@dataclass(frozen=True)
class Figure:
    """An expected value and where it came from (a setting, a row of the table with its source)."""

    value: float
    source: str


@dataclass(frozen=True)
class Floor:
    """A bus bandwidth floor: GB/s measured at `size_bytes`, for `nodes` nodes (None: any count)."""

    gbps: float
    size_bytes: int  # the message size it was measured at
    source: str  # a key of the table's `sources`
    nodes: int | None = None


@dataclass(frozen=True)
class NodeType:
    """One row of the table; an unlisted type is an empty row."""

    name: str
    gpu: str | None = None  # the GPU model, for the reader
    # What every node of the type advertises (nvidia.com/gpu, vpc.amazonaws.com/efa), and the source.
    gpus: int | None = None
    efa: int | None = None
    capacity_source: str = ""  # a key of `sources`
    bert_samples_per_gpu: Figure | None = None
    # (topology, collective) -> floors, smallest size first
    busbw_floors: dict[tuple[str, str], tuple[Floor, ...]] = field(default_factory=dict)
    # topology -> why no bus bandwidth floor is listed (none published)
    busbw_none: dict[str, str] = field(default_factory=dict)


@cache
def _document() -> dict[str, Any]:
    import yaml  # not at import: see harness/cluster/manifests.py

    text = resources.files("harness.verdict").joinpath("thresholds.yaml").read_text()
    document = yaml.safe_load(text) or {}
    if not isinstance(document, dict) or not isinstance(document.get("node_types"), dict):
        raise ThresholdTableError("harness/verdict/thresholds.yaml: expected a mapping with `sources` and `node_types`")
    return document


def source_text(key: str) -> str:
    """The full citation of a source key of the table (the key itself when it is not one)."""
    sources = _document().get("sources") or {}
    return str(sources.get(key, key))


def _floor(entry: Any, where: str) -> Floor:
    if not isinstance(entry, dict) or not {"gbps", "size", "source"} <= set(entry):
        raise ThresholdTableError(f"harness/verdict/thresholds.yaml {where}: expected {{gbps, size, source[, nodes]}}, "
                                  f"found {entry!r}")
    return Floor(float(entry["gbps"]), parse_bytes(str(entry["size"])), str(entry["source"]), entry.get("nodes"))


def _floors(raw: Any, name: str) -> dict[tuple[str, str], tuple[Floor, ...]]:
    floors: dict[tuple[str, str], tuple[Floor, ...]] = {}
    for topology, collectives in (raw or {}).items():
        if topology not in (SINGLE_NODE, MULTI_NODE):
            raise ThresholdTableError(f"harness/verdict/thresholds.yaml {name}: topology {topology!r} is not "
                                      f"{SINGLE_NODE} or {MULTI_NODE}")
        for collective, entries in (collectives or {}).items():
            where = f"{name}.busbw_floors.{topology}.{collective}"
            parsed = [_floor(entry, where) for entry in entries or []]
            floors[(topology, collective)] = tuple(sorted(parsed, key=lambda f: f.size_bytes))
    return floors


@cache
def node_type(name: str | None) -> NodeType:
    """The table's row for a node type (an empty row when the type is not listed)."""
    row = _document()["node_types"].get(name or "")
    if row is None:
        return NodeType(name or "")
    bert = row.get("bert_samples_per_gpu")
    return NodeType(
        name=str(name), gpu=row.get("gpu"), gpus=row.get("gpus"), efa=row.get("efa"),
        capacity_source=str(row.get("capacity_source", "")),
        bert_samples_per_gpu=Figure(float(bert["value"]), f"{name} table: {bert['source']}") if bert else None,
        busbw_floors=_floors(row.get("busbw_floors"), str(name)),
        busbw_none={str(k): str(v) for k, v in (row.get("busbw_none") or {}).items()})


@dataclass(frozen=True)
class ThroughputFloor:
    """A throughput floor per GPU (= per rank) in the workload's throughput unit, and how it was
    derived (the table's formula with its figures and sources, a baseline file, or a setting)."""

    value: float
    origin: str  # "table", "baseline" or "setting": where it came from, for the report
    derivation: str  # the formula with its figures, or the file / setting


def _table_error(where: str, found: Any, expected: str) -> ThresholdTableError:
    return ThresholdTableError(f"harness/verdict/thresholds.yaml {where}: expected {expected}, found {found!r}")


def throughput_floor(name: str | None, workload: str, size: str | None) -> tuple[ThroughputFloor | None, str]:
    """The table's throughput floor for a node type, workload and size, or (None, why there is none):
    floor = peak x mfu_min / flops_per_unit, or units_per_step / max_step_ms for a step-bound workload
    (thresholds.yaml's header)."""
    document = _document()
    gpu = node_type(name).gpu
    if gpu is None:
        return None, f"{name or 'this node type'} is not in the table ({NONE_UNTIL_MEASURED})"
    peak = (document.get("gpu_peaks") or {}).get(gpu)
    if not isinstance(peak, dict):
        raise _table_error(f"gpu_peaks.{gpu}", peak, "{flops, precision, sources}")
    bound = (document.get("step_bound") or {}).get(workload)
    if bound is not None:
        value = 1000.0 * float(bound["units_per_step"]) / float(bound["max_step_ms"])
        return ThroughputFloor(value, "table", (
            f"{name} ({gpu}) {workload}: step-time ceiling {bound['units_per_step']} units / "
            f"{bound['max_step_ms']:g} ms = {value:.4g} per GPU (launch-bound, no MFU floor; source "
            f"{bound['source']}, harness/verdict/thresholds.yaml)")), ""
    combo = f"{workload}/{size}"
    if size is None:
        return None, f"the logs name no {workload} size: no floor can be chosen"
    if (why := (document.get("no_floor") or {}).get(combo)) is not None:
        return None, f"no {combo} floor on any GPU: {why}"
    if peak.get("flops") is None:
        return None, (f"no {combo} floor for {name}: no published peak for {gpu} "
                      f"({'; '.join(source_text(s) for s in peak.get('sources', []))})")
    mfu = (document.get("mfu_min") or {}).get(combo)
    flops = (document.get("flops_per_unit") or {}).get(combo)
    if mfu is None or flops is None:
        return None, f"no {combo} floor for {name}: the table has no minimum MFU for it ({NONE_UNTIL_MEASURED})"
    precision = str(peak["precision"])
    if precision not in mfu:
        raise _table_error(f"mfu_min.{combo}", mfu, f"a {precision} figure (the {gpu} peak's precision)")
    value = float(peak["flops"]) * float(mfu[precision]) / float(flops)
    sources = ", ".join(str(s) for s in peak.get("sources", []))
    return ThroughputFloor(value, "table", (
        f"{name} ({gpu}) {combo}: {float(peak['flops']):.4g} FLOP/s {precision} peak ({sources}) x minimum MFU "
        f"{float(mfu[precision]):g} / {float(flops):.4g} FLOP per unit = {value:.4g} per GPU "
        f"(harness/verdict/thresholds.yaml)")), ""


def minimum_throughput(override: float | None, setting: str, name: str | None) -> Figure | None:
    """The setting when the user gave one, else the node type's BERT row; None: no threshold."""
    if override is not None:
        return Figure(override, setting)
    return node_type(name).bert_samples_per_gpu


def busbw_floor(name: str | None, topology: str, collective: str, nodes: int,
                sweep_max_bytes: int | None) -> tuple[Floor | None, list[Floor]]:
    """The floor that applies to a sweep, and every floor listed for this (type, topology, collective,
    node count): the applicable one is the largest size the sweep reached (None when it reached none)."""
    listed = [f for f in node_type(name).busbw_floors.get((topology, collective), ())
              if f.nodes is None or f.nodes == nodes]
    reached = [f for f in listed if sweep_max_bytes is not None and f.size_bytes <= sweep_max_bytes]
    return (reached[-1] if reached else None), listed
