"""The metrics parser on the upstream fixtures, every format the workloads print, and hostile input:
malformed values are named problems (file, line, text, expected), never exceptions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.errors import UnrecognisedLog
from harness.metrics.log_lines import split_tag
from harness.metrics.records import FORMAT_ITER, FORMAT_KT2T, combine, parse_files, scan_file, scan_lines

from ...crafted_logs import metrics_line, metrics_record, nccl_table, training_log


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.metrics", *args], capture_output=True, text=True,
                          check=False)


def parse(text: str, source: str = "x.log"):
    return combine([scan_lines(text.splitlines(), source)])


def problems(text: str) -> list[str]:
    return [str(p) for p in parse(text).problems]


def test_32_rank_fixture_gives_32_ranks_and_statistics(fixtures):
    metrics = parse_files([fixtures / "bert-mpirun-32ranks.log"])
    assert metrics.workload == "bert" and not metrics.problems
    assert sorted(r.rank for r in metrics.ranks) == list(range(32))
    agg = metrics.aggregate()["throughput"]
    assert (agg["count"], agg["min"], agg["max"], agg["median"]) == (32, 9.86, 10.04, 9.91)
    assert metrics.aggregate()["training_time"]["max"] == pytest.approx(10.14)


def test_cli_prints_one_json_object(fixtures):
    done = run_cli(str(fixtures / "bert-mpirun-32ranks.log"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["workload"] == "bert" and len(out["ranks"]) == 32 and out["problems"] == []
    assert next(r for r in out["ranks"] if r["rank"] == 31) == {"rank": 31, "training_time": 10.09, "throughput": 9.91}
    assert set(out["aggregate"]["throughput"]) == {"min", "median", "max", "mean", "count"}


def test_cli_unrecognised_and_unreadable_files_exit_2(fixtures, tmp_path):
    done = run_cli(str(fixtures / "bert-mpirun-missing-env.log"))
    assert done.returncode == 2 and "bert-mpirun-missing-env.log" in done.stderr
    done = run_cli(str(tmp_path / "nope.log"))
    assert done.returncode == 2 and "nope.log" in done.stderr


def test_cli_output_is_standard_json_with_nonfinite_as_null(tmp_path):
    log = tmp_path / "nan.log"
    log.write_text(metrics_line(metrics_record(0, 1, loss_last=None, nonfinite=["loss_last"])) + "\n"
                   + "iter 0: loss nan, time 1.00ms, mfu n/a\n")
    done = run_cli(str(log))
    assert done.returncode == 0, done.stderr
    assert "NaN" not in done.stdout and "Infinity" not in done.stdout
    assert json.loads(done.stdout)["ranks"][0]["loss_last"] is None


@pytest.mark.parametrize(("line", "expected"), [
    ("[1,31]<stdout>:Process 31 - x", (31, "Process 31 - x")),
    ("[1,3]<stderr>:oops", (3, "oops")),
    ("[x,3]<stdout>:no", (None, "[x,3]<stdout>:no")),
    ("[1,3]no stream", (None, "[1,3]no stream")),
    ("[default0]:KT2T_STEP {}", (None, "[default0]:KT2T_STEP {}")),
    ("plain", (None, "plain")),
])
def test_mpi_tag(line, expected):
    assert split_tag(line) == expected


NANOGPT = """\
iter 0: loss 4.1700, time 900.00ms, mfu -100.00%
iter 1: loss 3.9000, time 250.00ms, mfu -100.00%
iter 5: loss 3.5000, time 240.00ms, mfu 31.50%
iter 6: loss 3.1000, time 260.00ms, mfu 32.00%, cuda memory 3.2G, lr 6.00e-04, total time 2.00s
"""


def test_nanogpt_iter_lines_give_the_loss_keys_the_verdict_reads(tmp_path):
    (tmp_path / "r0.log").write_text(NANOGPT)
    (tmp_path / "r1.log").write_text(NANOGPT.replace("mfu -100.00%", "mfu n/a"))
    done = run_cli(str(tmp_path / "r0.log"), str(tmp_path / "r1.log"))
    r0, r1 = json.loads(done.stdout)["ranks"]
    assert (r0["rank"], r0["iterations"], r0["loss_first"], r0["loss_last"], r0["mfu"]) == (0, 4, 4.17, 3.1, 0.32)
    assert r1["rank"] == 1


def test_interleaved_tagged_iter_lines_are_split_by_rank():
    lines = ["[1,0]<stdout>:iter 0: loss 4.0000, time 10.00ms, mfu n/a",
             "[1,1]<stdout>:iter 0: loss 9.0000, time 10.00ms, mfu n/a",
             "[1,1]<stdout>:iter 1: loss 8.0000, time 10.00ms, mfu n/a",
             "[1,0]<stdout>:iter 1: loss 3.0000, time 10.00ms, mfu n/a"]
    metrics = combine([scan_lines(lines)])
    assert metrics.source_format == FORMAT_ITER
    r0, r1 = metrics.ranks
    assert r0.steps == [(0, 4.0), (1, 3.0)] and r1.steps == [(0, 9.0), (1, 8.0)]


def test_nccl_tests_rows_keep_both_halves_and_wrong_counts():
    metrics = parse(nccl_table(232.0, 8, max_bytes=1 << 20) + "  1048576   262144  float  sum  -1  1.0  1.0  1.0  N/A"
                    "  1.0  1.0  1.0  N/A\n")
    sweep = metrics.sweep
    assert metrics.workload == "nccl-tests" and metrics.ranks == []
    assert sweep.max_size == 1 << 20 and sweep.requested_max_bytes == 1 << 20
    row = sweep.rows[-1]
    assert row.out_of_place.busbw == row.in_place.busbw and row.out_of_place.wrong == 0
    assert sweep.out_of_bounds == 0 and sweep.average is not None
    assert any("two with different values" in str(p) for p in metrics.problems)  # the same size again, other values


def test_kt2t_records_and_steps():
    metrics = parse(training_log(2, "nanogpt", gpus_per_node=1))
    assert metrics.source_format == FORMAT_KT2T and metrics.workload == "nanogpt" and not metrics.problems
    r0 = metrics.ranks[0]
    assert (r0.node, r0.pod, r0.values["tokens_per_s"]) == ("node-0", "nanogpt-worker-0", 120.0)
    assert r0.steps[0] == (0, 5.3) and r0.steps[-1] == (19, 3.1) and len(r0.steps) == 20


def test_duplicates_identical_collapse_restart_supersedes_different_is_a_problem():
    record = metrics_record(0, 1)
    same = metrics_line(record)
    restarted = metrics_line({**record, "restart_count": 1, "throughput": 99.0})
    metrics = combine([scan_lines([same], "launcher.log"), scan_lines([same], "worker.log")])
    assert len(metrics.ranks) == 1 and not metrics.problems
    metrics = combine([scan_lines([same, restarted], "a.log"), scan_lines([same], "b.log")])
    assert metrics.ranks[0].values["throughput"] == 99.0 and not metrics.problems
    other = metrics_line({**record, "throughput": 1.0})
    (problem,) = combine([scan_lines([same], "a.log"), scan_lines(["noise", other], "b.log")]).problems
    assert "KT2T_METRICS record for rank 0, found two with different values: a.log:1 and b.log:2" in str(problem)


def test_a_repeated_step_keeps_its_last_line():
    lines = ['KT2T_STEP {"rank":0,"step":3,"loss":9.0}', 'KT2T_STEP {"rank":0,"step":3,"loss":2.0}',
             metrics_line(metrics_record(0, 1))]
    assert parse("\n".join(lines)).ranks[0].steps == [(3, 2.0)]


@pytest.mark.parametrize(("text", "expected"), [
    ("[1,0]<stdout>:Process 0 - Throughput: 1.2.3 samples/second",
     "x.log:1: expected Process 0 - Throughput: a number"),
    ("# Avg bus bandwidth    : 1.2.3", "expected # Avg bus bandwidth: a number, found '1.2.3'"),
    ("iter 1: loss 3.0, time 1..0ms, mfu n/a", "expected iter 1: time: a number, found '1..0'"),
    ('KT2T_METRICS {"workload":"bert","rank":"x"}', "expected KT2T_METRICS: rank: a whole number >= 0, found '\"x\"'"),
    ('KT2T_METRICS {"workload":"bert"}', "expected KT2T_METRICS: rank (missing)"),
    ('KT2T_METRICS {"rank":0,"loss_last":NaN}', "NaN is not JSON"),
    ('KT2T_METRICS {"rank":0,"loss_last":1e999}', "overflows to infinity"),
    ('KT2T_METRICS {"rank":0,"rank":1}', "key 'rank' appears twice"),
    ('KT2T_METRICS {"rank":0} trailing', "nothing after the JSON object"),
    ('KT2T_METRICS {"rank":0,"throughput":"fast"}', "throughput: a number or null, found '\"fast\"'"),
    ("KT2T_METRICS " + "[" * 100_000, "a space and a JSON object"),
    ('KT2T_METRICS {"a":' + "[" * 100_000, "KT2T_METRICS: a JSON object"),
    ("KT2T_METRICS {" * 10_000, "KT2T_METRICS: a JSON object"),
    ('[1,3]<stdout>:KT2T_METRICS {"rank":2}', "rank 2 in a line mpirun tagged as rank 3"),
    ("  1024  256  float  sum  -1  9.1  0.1  x  0  9.1  0.1  0.1  0", "size 1024: busbw: a number, found 'x'"),
    ("  1024  256  float  sum  -1  9.1  0.1", None),  # too few columns: not a row
    ("  1024  256  float  sum  -1  9.1  0.1  0.2  0  1", "a row of 9 or 13 columns, found 10"),
    ('KT2T_STEP {"rank":0,"step":-1,"loss":1}', "step: a whole number >= 0"),
])
def test_malformed_values_are_named_problems(text, expected):
    found = problems(text + "\n" + metrics_line(metrics_record(5, 6)))
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_a_problem_quotes_the_line_cut_short():
    (problem,) = parse("Process 0 - Throughput: " + "9" * 100 + " samples/second").problems
    assert problem.line == 1 and len(problem.text) == 120 and "a number" in problem.expected


def test_a_last_line_without_newline_is_a_note_not_a_value(tmp_path):
    log = tmp_path / "cut.log"
    log.write_text(metrics_line(metrics_record(0, 2)) + "\n" + metrics_line(metrics_record(1, 2)))
    scan = scan_file(log)
    assert [r.value["rank"] for r in scan.records] == [0]
    (note,) = scan.notes
    assert "cut.log:2: the last line has no newline" in note


def test_a_log_without_any_format_is_unrecognised_but_malformed_values_are_problems():
    with pytest.raises(UnrecognisedLog, match="no known metric format in a.log"):
        combine([scan_lines(["epoch 1 done"], "a.log")])
    metrics = combine([scan_lines(["# Avg bus bandwidth : many"], "a.log")])
    assert metrics.workload == "unknown" and len(metrics.problems) == 1


def test_hostile_bytes_do_not_break_parsing(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"\xff\xfe\x00garbage\nProcess 0 - Throughput: 9.91 samples/second\n\x1b[31m\n")
    assert parse_files([log]).ranks[0].values["throughput"] == pytest.approx(9.91)


@pytest.mark.parametrize("line", [
    "KT2T_METRICS {" * 100_000,  # the shape that took 25 s at 1.1 MB with the old regex
    'KT2T_METRICS {"k":"' + "KT2T_METRICS {\\\"a\\\":\\\"" * 50_000,
    "Process 1 - Throughput: " + "1." * 500_000,
    "[1," + "9" * 1_000_000,
    "iter " + "9" * 1_000_000 + ": loss 1",
    " " * 1_000_000 + "1",
    "1 " * 500_000,
    "# Avg bus bandwidth : " + "9" * 1_000_000,
    'KT2T_STEP {"rank":0,"step":' + "9" * 1_000_000 + "}",
])
def test_adversarial_lines_give_problems_not_exceptions(line):
    """Linear time on these shapes is measured by bench/parser_adversarial.py at 50 MB."""
    scan = scan_lines([line])
    assert all(len(p.text) <= 120 for p in scan.problems)


def test_a_log_of_garbage_keeps_the_first_problems_and_counts_the_rest():
    metrics = combine([scan_lines(['KT2T_METRICS {"rank":"x"}'] * 1000, "junk.log")])
    assert len(metrics.problems) == 100 and metrics.problem_count == 1000
