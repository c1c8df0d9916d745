"""Metrics parsed from workload logs; `python -m harness.metrics FILE...` prints them as JSON.

Formats, one linear pass per log (line by line, harness/metrics/log_lines.py):
- this project's workloads (workloads/metric_lines.py): `KT2T_STEP {json}` per step and
  `KT2T_METRICS {json}` at the end, on every rank. NaN/inf are written as null and listed in
  the record's `nonfinite`.
- upstream BERT (aws-k8s-tester): `Process N - Throughput: Y samples/second`, `Process N -
  Training time: X seconds`, `Average Throughput: Y samples/second` (rank 0's own value).
- nanoGPT `iter N: loss X, time Yms, mfu Z%` (`-100.00%` is a warm-up sentinel, `n/a` none), with
  DLRover's optional tail.
- nccl-tests tables (`size count type redop root time algbw busbw #wrong` out-of-place, then the
  same in-place), `# Out of bounds values`, `# Avg bus bandwidth` (kept, never judged), the
  header's `maxBytes`; workloads.allreduce prints the out-of-place half of the same table.

Rules of a scan:
- mpirun's `--tag-output` prefix `[1,R]<stdout>:` gives the rank of lines that carry none (iter
  lines); a KT2T record or BERT line whose own rank differs from its tag is a problem.
- Every malformed value is a ParseProblem (file, line number, the text, what was expected),
  collected; nothing in a log's content raises.
- A last line without its newline (a log cut off mid-line) is not read as a value: a note.
- Which format wins: KT2T records, else upstream BERT, else nanoGPT iter lines; an nccl-tests
  table is kept beside any of them.
- Duplicates: a rank's identical records collapse (a launcher's and a worker's log may both hold
  a line); a record with a higher `restart_count` supersedes a lower one (an elastic restart);
  two different records of one rank with the same restart count are a problem naming both
  places. A step reported twice keeps its last line (a restarted rank repeats steps). Table
  rows follow the record rule, per message size.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UnrecognisedLog
from harness.metrics.log_lines import (
    METRICS_MARKER,
    STEP_MARKER,
    Iteration,
    Malformed,
    SweepRow,
    decode_record,
    looks_like_row,
    parse_bert,
    parse_bert_average,
    parse_comment,
    parse_iteration,
    parse_row,
    split_tag,
    validate_record,
    whole,
)

FORMAT_KT2T, FORMAT_BERT, FORMAT_ITER, FORMAT_NCCL, FORMAT_NONE = "kt2t", "bert", "nanogpt-iter", "nccl-tests", "none"
HEADER_PREFIX = "=== "  # the harness's own first line of a captured log (harness/cluster/logs.py)
SHOWN_TEXT = 120  # characters of a malformed line quoted in its problem
KEPT_PROBLEMS = 100  # problems kept per log (the rest are counted): a log of garbage must not fill memory


@dataclass(frozen=True)
class ParseProblem:
    """A value that could not be read: where, the line's text (cut), what was expected."""

    source: str
    line: int
    text: str
    expected: str

    def __str__(self) -> str:
        quoted = f" in {self.text!r}" if self.text else ""
        return f"{self.source}:{self.line}: expected {self.expected}{quoted}"


@dataclass
class RankMetrics:
    """What one rank reported: its values, where it ran, its [step, loss] series."""

    rank: int
    values: dict[str, Any] = field(default_factory=dict)
    node: str | None = None
    pod: str | None = None
    steps: list[tuple[int, float | None]] = field(default_factory=list)  # loss None: NaN/inf
    nonfinite: frozenset[str] = frozenset()  # keys whose value was NaN/inf (null in values)
    origin: str = ""  # file:line of the record

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank}
        if self.node is not None:
            out["node"] = self.node
        if self.pod is not None:
            out["pod"] = self.pod
        out.update(self.values)
        return out


@dataclass
class Sweep:
    """A bus bandwidth sweep's table (nccl-tests or workloads.allreduce) and its footer."""

    rows: list[SweepRow]
    average: float | None = None  # `# Avg bus bandwidth`: a property, never judged
    out_of_bounds: int | None = None
    requested_max_bytes: int | None = None  # the header's maxBytes
    operation: str | None = None  # `# Collective test starting: all_reduce_perf` (newer builds)

    @property
    def max_size(self) -> int | None:
        return max((row.size for row in self.rows), default=None)


@dataclass
class WorkloadMetrics:
    """Everything parsed from a job's logs."""

    workload: str
    ranks: list[RankMetrics]
    source_format: str = FORMAT_KT2T
    sweep: Sweep | None = None
    problems: list[ParseProblem] = field(default_factory=list)  # the first ones of each log
    problem_count: int = 0  # all of them
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def aggregate(self) -> dict[str, dict[str, float]]:
        """min/median/max/mean/count of every numeric per-rank metric."""
        series: dict[str, list[float]] = {}
        for rank in self.ranks:
            for key, value in rank.values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    series.setdefault(key, []).append(float(value))
        return {key: summarize(values) for key, values in series.items()}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "workload": self.workload, "format": self.source_format,
            "ranks": [r.as_dict() for r in sorted(self.ranks, key=lambda r: r.rank)],
            "aggregate": self.aggregate(),
            "problems": [str(p) for p in self.problems], "problem_count": self.problem_count, "notes": self.notes,
        }
        if self.sweep is not None:
            out["sweep"] = sweep_dict(self.sweep)
        out.update(self.extra)
        return out


def sweep_dict(sweep: Sweep) -> dict[str, Any]:
    return {"rows": [{"size": r.size, "out_of_place_gbps": r.out_of_place.busbw,
                      "in_place_gbps": r.in_place.busbw if r.in_place else None,
                      "wrong": [c.wrong for c in (r.out_of_place, r.in_place) if c is not None]} for r in sweep.rows],
            "average_gbps": sweep.average, "out_of_bounds": sweep.out_of_bounds,
            "requested_max_bytes": sweep.requested_max_bytes, "operation": sweep.operation}


def summarize(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "mean": statistics.fmean(values), "count": len(values)}


@dataclass(frozen=True)
class Located:
    """A value and the place (file:line) it came from."""

    value: Any
    origin: str


@dataclass
class LogScan:
    """One pass over one log, collecting every format it finds (see the module docstring)."""

    source: str
    records: list[Located] = field(default_factory=list)  # KT2T_METRICS objects
    # rank -> step -> loss, None when not finite: 8,000 ranks x 130 steps are a million entries, so
    # no tuple per step (a (loss, flag) pair cost 56 MiB more there).
    steps: dict[int, dict[int, float | None]] = field(default_factory=dict)
    bert: list[tuple[int, str, Located]] = field(default_factory=list)  # (rank, key, value)
    bert_average: float | None = None
    iterations: dict[int | None, list[Iteration]] = field(default_factory=dict)  # by tag rank
    resumed_from: int | None = None
    rows: list[Located] = field(default_factory=list)  # SweepRow
    comments: dict[str, Any] = field(default_factory=dict)
    problems: list[ParseProblem] = field(default_factory=list)  # the first KEPT_PROBLEMS
    problem_count: int = 0
    notes: list[str] = field(default_factory=list)

    def recognised(self) -> bool:
        return bool(self.records or self.bert or self.iterations or self.rows or self.comments)

    def feed(self, line: str, number: int) -> None:
        """One complete line (without its newline)."""
        try:
            self._dispatch(line, number)
        except Malformed as exc:
            self.problem(number, line, exc.expected)

    def problem(self, number: int, line: str, expected: str) -> None:
        self.problem_count += 1
        if len(self.problems) < KEPT_PROBLEMS:
            self.problems.append(ParseProblem(self.source, number, line[:SHOWN_TEXT], expected))

    def cut_off(self, line: str, number: int) -> None:
        """The last line had no newline: not read as a value (the log may have been cut mid-line)."""
        if line.strip():
            self.notes.append(f"{self.source}:{number}: the last line has no newline (cut off?), so it was "
                              f"not read as a value: {line[:SHOWN_TEXT]!r}")

    def _dispatch(self, line: str, number: int) -> None:
        # Cheap tests pick the one parser a line can match (a large log's lines are mostly noise).
        tag, text = split_tag(line)
        if (at := text.find("KT2T_")) >= 0:
            self._kt2t(text, at, tag, number)
        elif text.startswith("Process "):
            self._bert(text, tag, number)
        elif text.startswith("Average Throughput:"):
            self.bert_average = parse_bert_average(text)
        elif text.startswith("iter "):
            if (iteration := parse_iteration(text)) is not None:
                self.iterations.setdefault(tag, []).append(iteration)
        elif text.startswith("#"):
            if (comment := parse_comment(text)) is not None:
                self.comments.setdefault(comment[0], comment[1])
        elif text[:1].isdigit() or text[:1] == " ":
            if looks_like_row(tokens := text.split(maxsplit=13)):
                self.rows.append(Located(parse_row(tokens), f"{self.source}:{number}"))
        elif (at := text.find("resumed from step ")) >= 0:
            self.resumed_from = whole(text[at + len("resumed from step "):].split(maxsplit=1)[0] or "?",
                                      "resumed from step N")

    def _kt2t(self, text: str, at: int, tag: int | None, number: int) -> None:
        for marker in (METRICS_MARKER, STEP_MARKER):
            if text.startswith(marker, at):
                follows = text[at + len(marker):at + len(marker) + 1]
                if follows.isalnum() or follows == "_":
                    return  # another word that starts like a marker
                required = ("rank",) if marker == METRICS_MARKER else ("rank", "step")
                record, problems = validate_record(decode_record(text, at, marker), marker, required)
                for expected in problems:
                    self.problem(number, text, expected)
                if tag is not None and record["rank"] != tag:
                    raise Malformed(f"{marker}: rank {record['rank']} in a line mpirun tagged as rank {tag}")
                self._keep(marker, record, number)
                return

    def _keep(self, marker: str, record: dict[str, Any], number: int) -> None:
        if marker == METRICS_MARKER:
            self.records.append(Located(record, f"{self.source}:{number}"))
        elif "loss" in record:
            finite = "loss" not in (record.get("nonfinite") or ())
            self.steps.setdefault(record["rank"], {})[record["step"]] = record["loss"] if finite else None

    def _bert(self, text: str, tag: int | None, number: int) -> None:
        parsed = parse_bert(text)
        if parsed is None:
            return
        rank, key, value = parsed
        if tag is not None and rank != tag:
            raise Malformed(f"Process {rank}: the rank mpirun tagged the line with ({tag})")
        self.bert.append((rank, key, Located(value, f"{self.source}:{number}")))


def scan_lines(lines: Iterable[str], source: str = "<log>") -> LogScan:
    """Scan complete lines (each item one line; a trailing newline is optional)."""
    scan = LogScan(source)
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith(HEADER_PREFIX):
            continue
        scan.feed(line.rstrip("\r\n"), number)
    return scan


def scan_file(path: Path, source: str | None = None) -> LogScan:
    """Scan a log file, decoded leniently (logs may hold any bytes); OSError when it cannot be read."""
    scan = LogScan(source or str(path))
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith("\n"):
                scan.cut_off(line, number)
            elif not (number == 1 and line.startswith(HEADER_PREFIX)):
                scan.feed(line.rstrip("\n"), number)
    return scan


def read_lines(path: Path) -> Iterator[str]:
    """Lines of a log file, decoded leniently (logs may hold any bytes)."""
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        yield from handle


# ---- combining the scans of a job's logs --------------------------------------------------------


def _different(kind: str, first: Located, second: Located) -> ParseProblem:
    source, _, line = second.origin.rpartition(":")
    return ParseProblem(source, int(line), "", f"one {kind}, found two with different values: "
                                               f"{first.origin} and {second.origin}")


def resolve_records(located: Iterable[Located], problems: list[ParseProblem]) -> dict[int, Located]:
    """Each rank's record by the duplicate rule (module docstring)."""
    chosen: dict[int, Located] = {}
    for entry in located:
        rank = entry.value["rank"]
        kept = chosen.get(rank)
        if kept is None or restart_of(entry) > restart_of(kept):
            chosen[rank] = entry
        elif kept.value != entry.value and restart_of(entry) == restart_of(kept):
            problems.append(_different(f"KT2T_METRICS record for rank {rank}", kept, entry))
    return chosen


def restart_of(entry: Located) -> int:
    return int(entry.value.get("restart_count") or 0)


def _steps(scans: list[LogScan]) -> dict[int, list[tuple[int, float | None]]]:
    merged: dict[int, dict[int, float | None]] = {}
    for scan in scans:
        for rank, steps in scan.steps.items():
            merged.setdefault(rank, {}).update(steps)
    return {rank: sorted(steps.items()) for rank, steps in merged.items()}


def _kt2t_metrics(scans: list[LogScan], problems: list[ParseProblem]) -> WorkloadMetrics:
    chosen = resolve_records((r for scan in scans for r in scan.records), problems)
    steps = _steps(scans)
    ranks = []
    for rank, entry in sorted(chosen.items()):
        record = entry.value
        values = {k: v for k, v in record.items() if k not in ("rank", "node", "pod", "workload", "nonfinite")}
        ranks.append(RankMetrics(rank, values, record.get("node"), record.get("pod"), steps.get(rank, []),
                                 frozenset(record.get("nonfinite") or ()), entry.origin))
    workloads = sorted({str(e.value.get("workload", "unknown")) for e in chosen.values()})
    return WorkloadMetrics(", ".join(workloads), ranks, FORMAT_KT2T)


def _bert_metrics(scans: list[LogScan], problems: list[ParseProblem]) -> WorkloadMetrics:
    values: dict[int, dict[str, Located]] = {}
    for scan in scans:
        for rank, key, entry in scan.bert:
            kept = values.setdefault(rank, {}).setdefault(key, entry)
            if kept.value != entry.value:
                problems.append(_different(f"'{key}' line for process {rank}", kept, entry))
    ranks = [RankMetrics(rank, {k: e.value for k, e in entries.items()}, origin=next(iter(entries.values())).origin)
             for rank, entries in sorted(values.items())]
    averages = [s.bert_average for s in scans if s.bert_average is not None]
    extra = {"reported_average_throughput": averages[0]} if averages else {}
    return WorkloadMetrics("bert", ranks, FORMAT_BERT, extra=extra)


def _iteration_rank(rank: int, iterations: list[Iteration], resumed_from: int | None) -> RankMetrics:
    steps = [(it.step, it.loss if math.isfinite(it.loss) else None) for it in iterations]
    first, last = steps[0][1], steps[-1][1]
    real_mfu = [it.mfu for it in iterations if it.mfu is not None]
    values: dict[str, Any] = {
        "iterations": len(iterations), "loss_first": first, "loss_last": last,
        "mfu": real_mfu[-1] if real_mfu else None,
        # The first iteration includes start-up (compile, warm-up): leave it out of the time.
        "ms_per_iter": statistics.median([it.ms for it in iterations[1:]] or [iterations[0].ms]),
    }
    if resumed_from is not None:
        values["resumed_from_step"] = resumed_from
    nonfinite = frozenset(k for k, v in (("loss_first", first), ("loss_last", last)) if v is None)
    return RankMetrics(rank, values, steps=steps, nonfinite=nonfinite)


def _iteration_metrics(scans: list[LogScan]) -> WorkloadMetrics:
    """Tagged lines are their tag's rank; a log's untagged lines are one rank, logs in rank order."""
    ranks: dict[int, RankMetrics] = {}
    untagged = 0
    for scan in scans:
        for tag, iterations in scan.iterations.items():
            rank = tag if tag is not None else untagged
            untagged += tag is None
            ranks.setdefault(rank, _iteration_rank(rank, iterations, scan.resumed_from))
    return WorkloadMetrics("nanogpt", sorted(ranks.values(), key=lambda r: r.rank), FORMAT_ITER)


def _sweep(scans: list[LogScan], problems: list[ParseProblem]) -> Sweep | None:
    rows: dict[int, Located] = {}
    for entry in (row for scan in scans for row in scan.rows):
        kept = rows.setdefault(entry.value.size, entry)
        if kept.value != entry.value:
            problems.append(_different(f"table row for size {entry.value.size}", kept, entry))
    comments: dict[str, Any] = {}
    for scan in scans:
        for key, value in scan.comments.items():
            comments.setdefault(key, value)
    if not rows and "average" not in comments:
        return None
    return Sweep([rows[size].value for size in sorted(rows)], comments.get("average"), comments.get("out_of_bounds"),
                 comments.get("max_bytes"), comments.get("operation"))


def combine(scans: list[LogScan]) -> WorkloadMetrics:
    """The metrics of a job from the scans of its logs (one per pod, or one per rank for iter logs).

    UnrecognisedLog when no log holds any known format nor any malformed value of one.
    """
    problems = [p for scan in scans for p in scan.problems]
    sweep = _sweep(scans, problems)
    if any(scan.records for scan in scans):
        metrics = _kt2t_metrics(scans, problems)
    elif any(scan.bert for scan in scans):
        metrics = _bert_metrics(scans, problems)
    elif any(scan.iterations for scan in scans):
        metrics = _iteration_metrics(scans)
    elif sweep is not None:
        metrics = WorkloadMetrics("nccl-tests", [], FORMAT_NCCL)
    elif problems:
        metrics = WorkloadMetrics("unknown", [], FORMAT_NONE)
    else:
        names = ", ".join(s.source for s in scans)
        raise UnrecognisedLog(f"parse metrics: no known metric format in {names}")
    metrics.sweep, metrics.problems = sweep, problems
    metrics.problem_count = len(problems) + sum(scan.problem_count - len(scan.problems) for scan in scans)
    metrics.notes = [note for scan in scans for note in scan.notes]
    return metrics


def parse_files(paths: Iterable[Path]) -> WorkloadMetrics:
    return combine([scan_file(p) for p in paths])


USAGE = """usage: python -m harness.metrics FILE...
Prints the workload's per-rank metrics, their aggregate and any parse problems as one JSON object.
BERT/mpirun and KT2T logs may hold all ranks in one file; for untagged iter-style (nanoGPT) logs
each FILE is one rank, in rank order."""


def main(argv: list[str] | None = None) -> int:
    """CLI: print one JSON object for the given logs; exit 2 naming a file it cannot use."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    scans = []
    for arg in args:
        try:
            scans.append(scan_file(Path(arg), arg))
        except OSError as exc:
            print(f"harness.metrics: cannot read {arg}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if not scans[-1].recognised() and not scans[-1].problems:
            print(f"harness.metrics: {arg}: no known metric format (expected KT2T_METRICS, BERT 'Process N - "
                  "Throughput', nanoGPT 'iter N: loss' or nccl-tests lines)", file=sys.stderr)
            return 2
    print(json.dumps(combine(scans).as_dict(), indent=2, allow_nan=False))
    return 0

