"""Metric parsing on the upstream fixtures and on every format the workloads print."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.metrics import combine, parse_files, scan_lines, strip_mpi_tag


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.metrics", *args], capture_output=True, text=True,
                          check=False)


def test_32_rank_fixture_gives_32_ranks_and_statistics(fixtures):
    metrics = parse_files([fixtures / "bert-mpirun-32ranks.log"])
    assert metrics.workload == "bert"
    assert sorted(r.rank for r in metrics.ranks) == list(range(32))
    agg = metrics.aggregate()["throughput"]
    assert agg["count"] == 32
    assert agg["min"] == pytest.approx(9.86)
    assert agg["max"] == pytest.approx(10.04)
    assert agg["median"] == pytest.approx(9.91)
    assert metrics.aggregate()["training_time"]["max"] == pytest.approx(10.14)


def test_cli_prints_one_json_object(fixtures):
    done = run_cli(str(fixtures / "bert-mpirun-32ranks.log"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["workload"] == "bert"
    assert len(out["ranks"]) == 32
    rank31 = next(r for r in out["ranks"] if r["rank"] == 31)
    assert rank31 == {"rank": 31, "training_time": 10.09, "throughput": 9.91}
    assert set(out["aggregate"]["throughput"]) == {"min", "median", "max", "mean", "count"}


def test_cli_unrecognised_and_unreadable_files_exit_2(fixtures, tmp_path):
    done = run_cli(str(fixtures / "bert-mpirun-missing-env.log"))
    assert done.returncode == 2
    assert "bert-mpirun-missing-env.log" in done.stderr
    missing = tmp_path / "nope.log"
    done = run_cli(str(missing))
    assert done.returncode == 2
    assert "nope.log" in done.stderr


def test_mpi_tag_stripped():
    assert strip_mpi_tag("[1,31]<stdout>:Process 31 - Throughput: 9.91 samples/second") == (
        31, "Process 31 - Throughput: 9.91 samples/second")
    assert strip_mpi_tag("plain") == (None, "plain")


NANOGPT = """\
iter 0: loss 4.1700, time 900.00ms, mfu -100.00%
iter 1: loss 3.9000, time 250.00ms, mfu -100.00%
iter 5: loss 3.5000, time 240.00ms, mfu 31.50%
iter 6: loss 3.1000, time 260.00ms, mfu 32.00%, cuda memory 3.2G, lr 6.00e-04, total time 2.00s
"""


def test_nanogpt_iter_lines_skip_the_mfu_sentinel(tmp_path):
    rank0 = tmp_path / "r0.log"
    rank0.write_text(NANOGPT)
    rank1 = tmp_path / "r1.log"
    rank1.write_text(NANOGPT.replace("mfu -100.00%", "mfu n/a"))
    done = run_cli(str(rank0), str(rank1))
    out = json.loads(done.stdout)
    assert out["workload"] == "nanogpt"
    r0, r1 = out["ranks"]
    assert (r0["rank"], r0["iterations"], r0["final_loss"], r0["mfu"]) == (0, 4, 3.1, 0.32)
    assert r1["rank"] == 1


def test_nanogpt_without_real_mfu_reports_null():
    scan = scan_lines(["iter 0: loss 4.0000, time 10.00ms, mfu -100.00%",
                       "iter 1: loss 3.0000, time 10.00ms, mfu n/a"])
    assert combine([scan]).ranks[0].values["mfu"] is None


NCCL = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    30.11    0.00    0.00      0    29.80    0.00    0.00      0
  2147483648     536870912     float     sum      -1   9876.5  217.43  380.50      0   9870.1  217.57  380.75      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 190.3125
"""


def test_nccl_tests_table():
    metrics = combine([scan_lines(NCCL.splitlines())])
    assert metrics.workload == "nccl-tests"
    values = metrics.ranks[0].values
    assert values["busbw_avg"] == pytest.approx(190.3125)
    assert values["busbw_max"] == pytest.approx(380.50)
    assert values["max_bytes"] == 2147483648
    assert values["out_of_bounds"] == 0


def test_our_metrics_lines_win_and_dedupe_ranks():
    lines = [
        'KT2T_METRICS {"workload": "bert", "rank": 0, "world_size": 2, "node": "n0", "throughput": 5.5}',
        "[1,1]<stdout>:KT2T_METRICS " + json.dumps({"workload": "bert", "rank": 1, "throughput": 5.0}),
        "Process 0 - Throughput: 1.00 samples/second",
    ]
    metrics = combine([scan_lines(lines), scan_lines(lines[:1])])
    assert metrics.workload == "bert"
    assert sorted(r.rank for r in metrics.ranks) == [0, 1]
    assert next(r for r in metrics.ranks if r.rank == 0).node == "n0"


def test_hostile_bytes_do_not_break_parsing(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"\xff\xfe\x00garbage\nProcess 0 - Throughput: 9.91 samples/second\n\x1b[31m\n")
    assert parse_files([log]).ranks[0].values["throughput"] == pytest.approx(9.91)
