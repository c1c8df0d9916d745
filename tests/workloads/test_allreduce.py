"""The all-reduce sweep: nccl-tests' table, correct bus bandwidth, the NCCL_TESTS_MIN_BW gate."""

from __future__ import annotations

import re

import pytest
from workload_runs import assert_harness_parses, assert_reported

pytest.importorskip("torch")

pytestmark = pytest.mark.workloads

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+float\s+sum\s+-1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)$")


@pytest.mark.timeout(180)
def test_allreduce_prints_nccl_tests_table(torchrun, tmp_path):
    run = torchrun("allreduce", "--size", "tiny", "--max-bytes", "64K")
    assert run.returncode == 0, run.explain()
    lines = run.stdout.splitlines()
    assert "#       size         count      type   redop    root     time   algbw   busbw #wrong" in lines
    rows = [ROW.match(ln) for ln in lines if ROW.match(ln)]
    assert [int(r.group(1)) for r in rows] == [8 << i for i in range(14)]  # 8 B .. 64 KiB, factor 2
    for r in rows:
        assert int(r.group(2)) * 4 == int(r.group(1))  # float32 elements
        assert r.group(6) == "0"
        # two ranks: 2(n-1)/n = 1, so busbw equals algbw
        assert r.group(5) == r.group(4)
    assert "# Out of bounds values : 0 OK" in lines
    [avg] = [ln for ln in lines if ln.startswith("# Avg bus bandwidth    : ")]
    metrics = assert_reported(run, "allreduce", training=False)
    for records in run.steps.values():  # a step per message size, on every rank
        assert [r["bytes"] for r in records] == [8 << i for i in range(14)]
        assert all(r["wrong"] == 0 and r["busbw"] == r["algbw"] > 0 for r in records)
    assert metrics[0]["busbw_avg"] == metrics[1]["busbw_avg"] == pytest.approx(float(avg.split(":")[1]), rel=1e-4)
    assert metrics[0]["max_bytes"] == 64 << 10
    assert_harness_parses(run, tmp_path, "allreduce")


@pytest.mark.timeout(180)
def test_allreduce_fails_below_min_bw(torchrun):
    run = torchrun("allreduce", "--size", "tiny", "--max-bytes", "1K", env={"NCCL_TESTS_MIN_BW": "100000"})
    assert run.returncode != 0
    assert "below 0.9 x NCCL_TESTS_MIN_BW=100000" in run.stderr


@pytest.mark.timeout(180)
def test_allreduce_seconds_times_each_size_for_that_long_on_every_rank_alike(torchrun):
    run = torchrun("allreduce", "--size", "tiny", "-b", "64K", "-e", "64K", "--seconds", "1")
    assert run.returncode == 0, run.explain()
    [(_, first), (_, second)] = sorted(run.steps.items())
    [one], [other] = first, second
    assert one["iters"] == other["iters"] > 5  # more than tiny's -n, the same count on both ranks
    # The mean time x the count: about a second (estimated from a shorter run, so not to the ms).
    assert one["iters"] * one["ms"] >= 600, (one["iters"], one["ms"])
