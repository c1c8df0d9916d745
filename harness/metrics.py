"""Metrics parsed from workload logs; `python -m harness.metrics FILE...` prints them as JSON.

Formats (upstream aws-k8s-tester's BERT and nccl-tests runs, nanoGPT, and this project's workloads):
- mpirun `--tag-output` prefixes `[1,<rank>]<stdout>:`; the rank in the tag wins over none.
- upstream BERT: `Process N - Training time: X seconds`, `Process N - Throughput: Y samples/second`,
  `Average Throughput: Y samples/second` (rank 0; upstream prints rank 0's own value).
- nanoGPT `iter N: loss X, time Yms, mfu Z%` (`-100.00%` is a warm-up sentinel, not a value; ours
  prints `mfu n/a` where no peak is known) with DLRover's optional `, cuda memory ...` tail.
- nccl-tests rows `size count type redop root time algbw busbw #wrong ...`, `# Avg bus bandwidth`.
- this project's workloads: one `KT2T_METRICS {json}` line per rank.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UnrecognisedLog

MPI_TAG = re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>:(?P<text>.*)$")
BERT_TIME = re.compile(r"Process (?P<rank>\d+) - Training time: (?P<v>[\d.]+) seconds")
BERT_THROUGHPUT = re.compile(r"Process (?P<rank>\d+) - Throughput: (?P<v>[\d.]+) samples/second")
BERT_AVERAGE = re.compile(r"^Average Throughput: (?P<v>[\d.]+) samples/second")
ITER = re.compile(
    r"^iter (?P<iter>\d+): loss (?P<loss>[-\d.naif]+), time (?P<ms>[\d.]+)ms, "
    r"mfu (?:(?P<mfu>-?[\d.]+)%|n/a)"
)
RESUMED = re.compile(r"resumed from step (?P<step>\d+)")
NCCL_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
    r"(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)"
)
NCCL_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>[\d.]+)")
NCCL_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<v>\d+)")
METRICS_LINE = re.compile(r"KT2T_METRICS (?P<json>\{.*\})\s*$")

MFU_SENTINEL = -100.0


@dataclass
class RankMetrics:
    """What one rank reported."""

    rank: int
    values: dict[str, Any] = field(default_factory=dict)
    node: str | None = None
    pod: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank}
        if self.node is not None:
            out["node"] = self.node
        if self.pod is not None:
            out["pod"] = self.pod
        out.update(self.values)
        return out


@dataclass
class WorkloadMetrics:
    """Everything parsed from a job's logs."""

    workload: str
    ranks: list[RankMetrics]
    extra: dict[str, Any] = field(default_factory=dict)

    def aggregate(self) -> dict[str, dict[str, float]]:
        """min/median/max/mean/count of every numeric per-rank metric."""
        series: dict[str, list[float]] = {}
        for rank in self.ranks:
            for key, value in rank.values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    series.setdefault(key, []).append(float(value))
        return {key: summarize(values) for key, values in series.items()}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": self.workload,
            "ranks": [r.as_dict() for r in sorted(self.ranks, key=lambda r: r.rank)],
            "aggregate": self.aggregate(),
        }
        out.update(self.extra)
        return out


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "count": len(values),
    }


def strip_mpi_tag(line: str) -> tuple[int | None, str]:
    """Split mpirun's `[1,<rank>]<stdout>:` tag off a line."""
    match = MPI_TAG.match(line)
    if match:
        return int(match["rank"]), match["text"]
    return None, line


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class _LogScan:
    """One pass over one log's lines, collecting every format it finds."""

    source: str
    bert: dict[int, dict[str, float]] = field(default_factory=dict)
    bert_average: float | None = None
    iters: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: int | None = None
    nccl_rows: list[dict[str, Any]] = field(default_factory=list)
    nccl_avg_busbw: float | None = None
    nccl_out_of_bounds: int | None = None
    reported: list[dict[str, Any]] = field(default_factory=list)

    def feed(self, raw_line: str) -> None:
        # Cheap substring tests pick the one regex a line can match: every line of a large log
        # went through all of them before (most of a 256-pod job's harness CPU).
        line = raw_line.rstrip("\r\n")
        if line.startswith("["):
            # Every format carries its rank in its own text; the mpirun tag only needs removing.
            _, line = strip_mpi_tag(line)
        if "KT2T_METRICS" in line:
            self._feed_metrics_line(line)
        elif "Process " in line:
            if match := BERT_THROUGHPUT.search(line):
                self.bert.setdefault(int(match["rank"]), {})["throughput"] = float(match["v"])
            elif match := BERT_TIME.search(line):
                self.bert.setdefault(int(match["rank"]), {})["training_time"] = float(match["v"])
        elif line.startswith("Average Throughput"):
            if match := BERT_AVERAGE.match(line):
                self.bert_average = float(match["v"])
        elif line.startswith("iter "):
            if match := ITER.match(line):
                mfu = _float(match["mfu"]) if match["mfu"] is not None else None
                self.iters.append({
                    "iter": int(match["iter"]),
                    "loss": _float(match["loss"]),
                    "ms": float(match["ms"]),
                    "mfu": None if mfu is None or mfu == MFU_SENTINEL else mfu / 100.0,
                })
        elif "resumed from step" in line:
            if match := RESUMED.search(line):
                self.resumed_from = int(match["step"])
        elif line.startswith("#"):
            if match := NCCL_AVG.match(line):
                self.nccl_avg_busbw = float(match["v"])
            elif match := NCCL_OOB.match(line):
                self.nccl_out_of_bounds = int(match["v"])
        elif (line[:1].isspace() or line[:1].isdigit()) and (match := NCCL_ROW.match(line)):
            self.nccl_rows.append({k: _float(match[k]) for k in ("size", "time", "algbw", "busbw")})

    def _feed_metrics_line(self, line: str) -> None:
        match = METRICS_LINE.search(line)
        if match is None:
            return
        try:
            record = json.loads(match["json"])
        except json.JSONDecodeError:
            return
        if isinstance(record, dict) and "rank" in record:
            self.reported.append(record)


def scan_lines(lines: Iterable[str], source: str = "<log>") -> _LogScan:
    scan = _LogScan(source)
    for line in lines:
        scan.feed(line)
    return scan


def _iter_rank(rank: int, scan: _LogScan) -> RankMetrics:
    losses = [it["loss"] for it in scan.iters if it["loss"] is not None]
    real_mfu = [it["mfu"] for it in scan.iters if it["mfu"] is not None]
    values: dict[str, Any] = {
        "iterations": len(scan.iters),
        "final_loss": losses[-1] if losses else None,
        "first_loss": losses[0] if losses else None,
        "mfu": real_mfu[-1] if real_mfu else None,
        # The first iteration includes start-up (compile, warm-up): leave it out of the time.
        "ms_per_iter": statistics.median([it["ms"] for it in scan.iters[1:]] or [scan.iters[0]["ms"]]),
    }
    if scan.resumed_from is not None:
        values["resumed_from_step"] = scan.resumed_from
    return RankMetrics(rank, values)


def combine(scans: list[_LogScan]) -> WorkloadMetrics:
    """Turn the scans of a job's logs (one per pod, or one per rank for iter logs) into metrics.

    Precedence: our KT2T_METRICS lines (exact), then the upstream formats. A rank reported in
    several logs (a launcher's and a worker's) is counted once.
    """
    reported = [record for scan in scans for record in scan.reported]
    if reported:
        ranks: dict[int, RankMetrics] = {}
        for record in reported:
            values = {k: v for k, v in record.items() if k not in ("rank", "node", "pod", "workload")}
            ranks.setdefault(int(record["rank"]), RankMetrics(int(record["rank"]), values,
                                                              record.get("node"), record.get("pod")))
        return WorkloadMetrics(str(reported[0].get("workload", "unknown")), list(ranks.values()))
    bert = {rank: vals for scan in scans for rank, vals in scan.bert.items()}
    if bert:
        extra = {}
        averages = [s.bert_average for s in scans if s.bert_average is not None]
        if averages:
            extra["reported_average_throughput"] = averages[0]
        return WorkloadMetrics("bert", [RankMetrics(r, v) for r, v in bert.items()], extra)
    iter_scans = [scan for scan in scans if scan.iters]
    if iter_scans:
        return WorkloadMetrics("nanogpt", [_iter_rank(i, s) for i, s in enumerate(iter_scans)])
    nccl = [scan for scan in scans if scan.nccl_avg_busbw is not None or scan.nccl_rows]
    if nccl:
        scan = nccl[0]
        values: dict[str, Any] = {"busbw_avg": scan.nccl_avg_busbw}
        if scan.nccl_rows:
            values["busbw_max"] = max(row["busbw"] for row in scan.nccl_rows)
            values["max_bytes"] = max(row["size"] for row in scan.nccl_rows)
        if scan.nccl_out_of_bounds is not None:
            values["out_of_bounds"] = scan.nccl_out_of_bounds
        return WorkloadMetrics("nccl-tests", [RankMetrics(0, values)], {"sizes": scan.nccl_rows})
    names = ", ".join(s.source for s in scans)
    raise UnrecognisedLog(f"parse metrics: no known metric format in {names}")


def read_lines(path: Path) -> Iterator[str]:
    """Lines of a log file, decoded leniently (logs may hold any bytes)."""
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        yield from handle


def parse_files(paths: Iterable[Path]) -> WorkloadMetrics:
    return combine([scan_lines(read_lines(p), str(p)) for p in paths])


def main(argv: list[str] | None = None) -> int:
    """CLI: print one JSON object for the given logs; exit 2 naming a file it cannot use."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m harness.metrics FILE...\n"
              "Prints the workload's per-rank metrics and their aggregate as one JSON object.\n"
              "BERT/mpirun logs may hold all ranks in one file; for iter-style (nanoGPT) logs each\n"
              "FILE is one rank, in rank order.")
        return 0 if args else 2
    scans = []
    for arg in args:
        path = Path(arg)
        try:
            scans.append(scan_lines(read_lines(path), arg))
        except OSError as exc:
            print(f"harness.metrics: cannot read {arg}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if not (scans[-1].reported or scans[-1].bert or scans[-1].iters or scans[-1].nccl_rows
                or scans[-1].nccl_avg_busbw is not None):
            print(f"harness.metrics: {arg}: no known metric format (expected BERT 'Process N - "
                  "Throughput', nanoGPT 'iter N: loss', nccl-tests or KT2T_METRICS lines)",
                  file=sys.stderr)
            return 2
    print(json.dumps(combine(scans).as_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
