"""What one line of a workload log says, in each format the harness reads; strict about values.

Every function here looks at one line in time linear in its length: markers are found with
str.find / startswith, JSON is decoded with json.JSONDecoder.raw_decode from the brace, and
the only regexes (NUMBER, WHOLE) are unambiguous and applied to tokens of at most MAX_TOKEN
characters. A malformed value raises Malformed (what was expected); the scanner
(harness.metrics.records) turns it into a ParseProblem with the file and line, so nothing escapes a scan.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Strict number grammar: optional sign, digits with an optional fraction (or a bare fraction),
# optional exponent. No `1_000`, no `nan`, no spaces: float() would take those.
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
WHOLE = re.compile(r"\d+", re.ASCII)
MAX_TOKEN = 64  # longer than any number a workload prints: a longer token is malformed at once
NONFINITE_WORDS = frozenset({"nan", "-nan", "+nan", "inf", "+inf", "-inf", "infinity", "-infinity"})
MFU_SENTINEL = -100.0  # nanoGPT prints `mfu -100.00%` for its first iterations: not a value
METRICS_MARKER, STEP_MARKER = "KT2T_METRICS", "KT2T_STEP"
TAG_SEARCH_LIMIT = 40  # an mpirun tag `[1,12345]<stdout>:` is short; never search a long line for it


class Malformed(Exception):
    """A value that does not follow its format; `expected` says what would have."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _shown(token: str) -> str:
    return repr(token if len(token) <= 40 else token[:40] + "...")


def number(token: str, what: str) -> float:
    """A finite number in the strict grammar, or Malformed naming `what`."""
    if len(token) > MAX_TOKEN or NUMBER.fullmatch(token) is None:
        raise Malformed(f"{what}: a number, found {_shown(token)}")
    value = float(token)
    if not math.isfinite(value):
        raise Malformed(f"{what}: a finite number, found {_shown(token)}")
    return value


def whole(token: str, what: str) -> int:
    """A whole number >= 0 (ASCII digits), or Malformed naming `what`."""
    if len(token) > 18 or WHOLE.fullmatch(token) is None:
        raise Malformed(f"{what}: a whole number >= 0, found {_shown(token)}")
    return int(token)


def measured(token: str, what: str) -> float:
    """A number or a non-finite word (`nan`, `inf`: a real measurement of a diverged value)."""
    if token.lower() in NONFINITE_WORDS:
        return float(token.lower().replace("infinity", "inf").replace("+", ""))
    return number(token, what)


def split_tag(line: str) -> tuple[int | None, str]:
    """mpirun's `--tag-output` prefix `[<job>,<rank>]<stdout>:` (or `<stderr>:`) split off the line."""
    if not line.startswith("["):
        return None, line
    close = line.find("]", 1, TAG_SEARCH_LIMIT)
    job, comma, rank = line[1:close].partition(",") if close > 0 else ("", "", "")
    if not comma or not WHOLE.fullmatch(job) or not WHOLE.fullmatch(rank):
        return None, line
    for stream in ("<stdout>:", "<stderr>:"):
        if line.startswith(stream, close + 1):
            return int(rank), line[close + 1 + len(stream):]
    return None, line


# ---- KT2T_METRICS / KT2T_STEP: `MARKER {compact json}` (workloads/metric_lines.py) ---------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (the workloads write null and list the key in nonfinite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} overflows to infinity")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Keys interned: every rank's record repeats the same forty names (8,000 ranks: 18 MiB otherwise).
    record = {sys.intern(key): value for key, value in pairs}
    if len(record) != len(pairs):
        keys = [key for key, _ in pairs]
        raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} appears twice")
    return record


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float,
                            object_pairs_hook=_unique_keys)


def decode_record(text: str, marker_at: int, marker: str) -> dict[str, Any]:
    """The JSON object after `marker` (found at `marker_at`), which must end the line."""
    brace = marker_at + len(marker) + 1
    if text[marker_at + len(marker):brace] != " " or text[brace:brace + 1] != "{":
        raise Malformed(f"{marker}: '{marker} {{json}}' (a space and a JSON object after the marker)")
    try:
        record, end = _DECODER.raw_decode(text, brace)
    except json.JSONDecodeError as exc:
        raise Malformed(f"{marker}: a JSON object ({exc.msg} at column {exc.pos - brace + 1})") from None
    except (ValueError, RecursionError) as exc:  # a rejected constant, an overflow, nesting too deep
        raise Malformed(f"{marker}: a JSON object ({str(exc) or type(exc).__name__})") from None
    if text[end:].strip():
        raise Malformed(f"{marker}: nothing after the JSON object on its line")
    return record


# Keys whose value must be a whole number (with its minimum) or text, when present.
WHOLE_KEYS = {"rank": 0, "world_size": 1, "local_rank": 0, "restart_count": 0, "steps_requested": 0,
              "steps_completed": 0, "step": 0, "local_world_size": 1, "gpus_visible": 0, "gpus_per_node": 0,
              "compute_steps": 0}
TEXT_KEYS = frozenset({"workload"})
OPTIONAL_TEXT_KEYS = frozenset({"node", "pod", "device", "backend", "launcher", "probe_matmul_dtype",
                                "device_requested", "gpu_name"})
# Numeric keys by name: their value is a number, or null when not measured (listed in nonfinite
# when it was NaN/inf). Any key with one of these suffixes, or starting with probe_, is numeric.
NUMBER_KEYS = frozenset({"loss", "ms", "loss_first", "loss_last", "loss_expected_first", "throughput",
                         "throughput_avg", "tokens_per_s", "samples_per_s", "busbw_avg", "busbw_max", "algbw_max",
                         "params_checksum", "compute_ms_per_step", "mfu", "accuracy", "busbw", "algbw"})
NUMBER_SUFFIXES = ("_per_s", "_tflops", "_gbps", "_ms", "_s", "_seconds")


def is_number_key(key: str) -> bool:
    return key in NUMBER_KEYS or key.endswith(NUMBER_SUFFIXES) or (
        key.startswith("probe_") and key not in OPTIONAL_TEXT_KEYS)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _expected_of(key: str, value: Any) -> str | None:
    """What one key's value should have been, or None when it is well-formed (the common case: cheap)."""
    if key in WHOLE_KEYS:
        return None if _is_whole(value) and value >= WHOLE_KEYS[key] else f"a whole number >= {WHOLE_KEYS[key]}"
    if key in TEXT_KEYS:
        return None if isinstance(value, str) and value else "a name"
    if key in OPTIONAL_TEXT_KEYS:
        return None if value is None or isinstance(value, str) else "text or null"
    if key == "nonfinite":
        return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "a list of key names"
    if value is None or type(value) in (int, float) or not is_number_key(key):
        return None
    return "a number or null"


def _key_problem(key: str, value: Any) -> str | None:
    """What is wrong with one key's value, or None."""
    expected = _expected_of(key, value)
    return None if expected is None else f"{key}: {expected}, found {_shown(json.dumps(value))}"


def validate_record(record: Any, marker: str, required: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """The record with malformed keys left out, and what was wrong with each; Malformed when it is
    not an object or lacks one of `required` (without them it cannot be placed at all)."""
    if not isinstance(record, dict):
        raise Malformed(f"{marker}: a JSON object, found {type(record).__name__}")
    problems = {key: problem for key, value in record.items() if (problem := _key_problem(key, value))}
    for key in required:
        if key not in record or key in problems:
            raise Malformed(f"{marker}: {problems.get(key) or key + ' (missing)'}")
    clean = {key: value for key, value in record.items() if key not in problems}
    return clean, [f"{marker}: {problem}" for problem in problems.values()]


# ---- upstream formats -------------------------------------------------------------------------


def parse_bert(text: str) -> tuple[int, str, float] | None:
    """Upstream BERT: `Process N - Throughput: X samples/second` or `... - Training time: X seconds`
    as (rank, key, value); None for another `Process N - ...` line."""
    rank_token, dash, tail = text[len("Process "):].partition(" - ")
    if not dash:
        return None
    for label, key, unit in (("Throughput: ", "throughput", "samples/second"),
                             ("Training time: ", "training_time", "seconds")):
        if tail.startswith(label):
            value_token, _, rest = tail[len(label):].partition(" ")
            rank = whole(rank_token, "Process N: the rank")
            value = number(value_token, f"Process {rank} - {label.rstrip(': ')}")
            if rest.strip() != unit:
                raise Malformed(f"Process {rank} - {label.rstrip(': ')}: the unit {unit!r}")
            return rank, key, value
    return None


def parse_bert_average(text: str) -> float:
    """Upstream BERT rank 0: `Average Throughput: X samples/second`."""
    value_token = text[len("Average Throughput:"):].strip().partition(" ")[0]
    return number(value_token, "Average Throughput")


@dataclass(frozen=True)
class Iteration:
    """nanoGPT `iter N: loss X, time Yms, mfu Z%` (DLRover appends more fields: ignored)."""

    step: int
    loss: float  # may be NaN/inf: a diverged run
    ms: float
    mfu: float | None  # a fraction; None for the warm-up sentinel and `mfu n/a`


def parse_iteration(text: str) -> Iteration | None:
    """A nanoGPT iteration line, or None when the line is another `iter ...` text."""
    head, colon, rest = text[len("iter "):].partition(": ")
    if not colon or not rest.startswith("loss "):
        return None
    step = whole(head, "iter N: the iteration")
    parts = rest.split(", ", 3)
    loss = measured(parts[0][len("loss "):], f"iter {step}: loss")
    if len(parts) < 2 or not parts[1].startswith("time ") or not parts[1].endswith("ms"):
        raise Malformed(f"iter {step}: ', time <ms>ms' after the loss")
    ms = number(parts[1][len("time "):-2], f"iter {step}: time")
    mfu = None
    if len(parts) > 2 and parts[2].startswith("mfu ") and parts[2] != "mfu n/a":
        if not parts[2].endswith("%"):
            raise Malformed(f"iter {step}: mfu as 'Z%' or 'n/a'")
        percent = number(parts[2][len("mfu "):-1], f"iter {step}: mfu")
        mfu = None if percent == MFU_SENTINEL else percent / 100.0
    return Iteration(step, loss, ms, mfu)


# ---- nccl-tests (and workloads.allreduce, which prints the same table) -------------------------


@dataclass(frozen=True)
class Columns:
    """One half of an nccl-tests row: out-of-place or in-place."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: `N/A` (-c 0) or an old build's max-error column


@dataclass(frozen=True)
class SweepRow:
    """A row of the table: the message size and both halves (in-place absent from 9-column tables)."""

    size: int
    dtype: str
    redop: str
    out_of_place: Columns
    in_place: Columns | None


def _columns(tokens: list[str], size: int) -> Columns:
    wrong_token = tokens[3]
    if wrong_token == "N/A":
        wrong = None
    elif WHOLE.fullmatch(wrong_token):
        wrong = whole(wrong_token, f"size {size}: #wrong")
    else:
        number(wrong_token, f"size {size}: #wrong")  # an old build's max error: a number, not a count
        wrong = None
    return Columns(number(tokens[0], f"size {size}: time"), number(tokens[1], f"size {size}: algbw"),
                   number(tokens[2], f"size {size}: busbw"), wrong)


def looks_like_row(tokens: list[str]) -> bool:
    """size count type redop root ...: two whole numbers, then two names."""
    return (len(tokens) >= 9 and WHOLE.fullmatch(tokens[0]) is not None and WHOLE.fullmatch(tokens[1]) is not None
            and tokens[2].isidentifier() and tokens[3].isidentifier())


def parse_row(tokens: list[str]) -> SweepRow:
    """`size count type redop root time algbw busbw #wrong [time algbw busbw #wrong]`."""
    size = whole(tokens[0], "nccl-tests row: the size")
    if len(tokens) not in (9, 13):
        raise Malformed(f"size {size}: a row of 9 or 13 columns, found {len(tokens)}")
    if tokens[4] != "-1":
        whole(tokens[4], f"size {size}: root")
    in_place = _columns(tokens[9:13], size) if len(tokens) == 13 else None
    return SweepRow(size, tokens[2], tokens[3], _columns(tokens[5:9], size), in_place)


def parse_comment(text: str) -> tuple[str, Any] | None:
    """An nccl-tests `#` line the harness keeps: ('average', GB/s), ('out_of_bounds', n),
    ('max_bytes', requested) or ('operation', name); None for the others."""
    body = text[1:].strip()
    if body.startswith("Avg bus bandwidth"):
        return "average", number(body.partition(":")[2].strip(), "# Avg bus bandwidth")
    if body.startswith("Out of bounds values"):
        count = body.partition(":")[2].split()
        return "out_of_bounds", whole(count[0] if count else "", "# Out of bounds values")
    if body.startswith("Collective test starting:"):
        return "operation", body.partition(":")[2].strip()[:64]
    if body.startswith("nThread ") and " maxBytes " in body:
        tokens = body.split(maxsplit=12)
        at = tokens.index("maxBytes") if "maxBytes" in tokens else -1
        return ("max_bytes", whole(tokens[at + 1], "# maxBytes")) if 0 <= at < len(tokens) - 1 else None
    return None
