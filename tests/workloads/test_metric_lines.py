"""The KT2T_STEP / KT2T_METRICS contract in-process: encoding, the bound on step lines, the probe."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from workloads import metric_lines, probe  # noqa: E402 - after the torch skip
from workloads.distributed import DistEnv, Session  # noqa: E402

pytestmark = pytest.mark.workloads


def session(rank: int = 1) -> Session:
    return Session(DistEnv("torchrun", rank, rank, 2, 2, 0, 0), torch.device("cpu"), "gloo")


def lines(out: str, prefix: str) -> list[dict]:
    return [json.loads(line.removeprefix(prefix)) for line in out.splitlines() if line.startswith(prefix)]


def test_nonfinite_values_become_null_and_are_named():
    line = metric_lines.encode("X ", {"a": 1.0, "b": math.nan, "c": -math.inf, "d": "text"},
                               always_list_nonfinite=False)
    assert line == 'X {"a":1.0,"b":null,"c":null,"d":"text","nonfinite":["b","c"]}'
    assert metric_lines.encode("X ", {"a": 1}, always_list_nonfinite=True) == 'X {"a":1,"nonfinite":[]}'
    assert metric_lines.encode("X ", {"a": 1}, always_list_nonfinite=False) == 'X {"a":1}'


def test_a_nan_loss_is_null_and_listed_in_the_record(capfd, monkeypatch):
    monkeypatch.setenv("POD_NAME", "bert-training-worker-1")
    monkeypatch.setenv("NODE_NAME", "ip-10-0-1-5")
    reporter = metric_lines.Reporter("bert", session(), {"probe_matmul_tflops": 0.05})
    reporter.steps_requested = 3
    reporter.step(0, 5.3, 12.5)
    reporter.step(1, math.nan, 11.0)
    reporter.step(2, math.inf, 10.0)
    reporter.finish({"throughput": math.nan})
    out = capfd.readouterr().out
    steps = lines(out, metric_lines.STEP_PREFIX)
    assert steps[0] == {"rank": 1, "step": 0, "loss": 5.3, "ms": 12.5}
    assert steps[1] == {"rank": 1, "step": 1, "loss": None, "ms": 11.0, "nonfinite": ["loss"]}
    [record] = lines(out, metric_lines.METRICS_PREFIX)
    assert record["loss_first"] == 5.3
    assert record["loss_last"] is None and record["throughput"] is None
    assert record["nonfinite"] == ["loss_last", "throughput"]
    assert (record["pod"], record["node"], record["rank"], record["world_size"]) == (
        "bert-training-worker-1",
        "ip-10-0-1-5",
        1,
        2,
    )
    assert (record["steps_requested"], record["steps_completed"]) == (3, 3)
    assert record["probe_matmul_tflops"] == 0.05
    # The kernel's boot id: one per host, so the harness knows nodes that share one host's CPUs.
    assert record["host_boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_pod_is_null_outside_kubernetes(capfd, monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    metric_lines.Reporter("allreduce", session(), {}).finish({})
    [record] = lines(capfd.readouterr().out, metric_lines.METRICS_PREFIX)
    assert record["pod"] is None
    assert record["steps_completed"] == 0 and "loss_first" not in record  # no loss: not a training workload


def test_step_lines_are_bounded_and_the_last_step_is_always_printed(capfd):
    reporter = metric_lines.Reporter("nanogpt", session(0), {})
    total = metric_lines.STEP_LINES_IN_FULL + 2 * metric_lines.STEP_LINES_EVERY + 5  # 0 .. 1204
    for step in range(total):
        reporter.step(step, 1.0)
    reporter.finish({})
    printed = [s["step"] for s in lines(capfd.readouterr().out, metric_lines.STEP_PREFIX)]
    assert printed == [*range(metric_lines.STEP_LINES_IN_FULL), 1000, 1100, 1200, total - 1]


def test_a_resumed_run_counts_steps_over_the_whole_job(capfd):
    reporter = metric_lines.Reporter("nanogpt", session(0), {})
    reporter.steps_requested = 40
    for step in range(20, 40):
        reporter.step(step, 1.0)
    reporter.finish({})
    [record] = lines(capfd.readouterr().out, metric_lines.METRICS_PREFIX)
    assert (record["steps_requested"], record["steps_completed"]) == (40, 40)


def test_matmul_probe_on_cpu_is_fp32_and_time_boxed(monkeypatch):
    monkeypatch.setenv(probe.PROBE_SECONDS_VARIABLE, "0.3")
    record = probe.compute_probe(torch.device("cpu"))
    assert record["probe_matmul_dtype"] == "float32" and record["probe_matmul_n"] == probe.MATMUL_N["cpu"]
    assert 0 < record["probe_matmul_tflops"] < 100  # a CPU core: far below any GPU
    assert "probe_h2d_gbps" not in record  # GPUs only
    # Time-boxed: the box plus a warm-up, not a fixed count of products.
    assert 0.3 <= record["probe_seconds"] < 1.3
    # Timed in slices apart: the median and the range the straggler verdict reads its spread from.
    assert record["probe_matmul_tflops_repeats"] == probe.PROBE_REPEATS == 5
    assert record["probe_matmul_tflops_min"] <= record["probe_matmul_tflops"] <= record["probe_matmul_tflops_max"]


def test_compute_window_reports_its_spread_over_consecutive_runs_of_steps():
    """Steps of 1 ms, then steps of 20 ms: the slowest run of steps and the fastest are both in the record."""
    calls = iter(range(10**6))
    record = probe.compute_window(torch.nn.Linear(1, 1), lambda: time.sleep(0.001 if next(calls) < 50 else 0.02),
                                  torch.device("cpu"), seconds=0.5, warmup=0)
    assert record["compute_ms_per_step_repeats"] == 5
    assert record["compute_ms_per_step_min"] < 5 < 15 < record["compute_ms_per_step_max"], record
    assert record["compute_ms_per_step_min"] <= record["compute_ms_per_step"] <= record["compute_ms_per_step_max"]
    assert [len(part) for part in probe.sub_windows([1.0] * 7, 5)] == [2, 2, 1, 1, 1]
    assert probe.sub_windows([1.0, 2.0], 5) == [[1.0], [2.0]] and probe.sub_windows([], 5) == []


def test_probe_length_is_a_setting_with_a_named_error():
    assert probe.probe_seconds({}) == probe.MATMUL_SECONDS == 2.0
    assert probe.probe_seconds({"KT2T_PROBE_SECONDS": "0.5"}) == 0.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(probe.EnvError, match=f"KT2T_PROBE_SECONDS='{bad}' must be a number of seconds > 0"):
            probe.probe_seconds({"KT2T_PROBE_SECONDS": bad})


def test_compute_window_leaves_no_gradient_behind():
    model = torch.nn.Linear(64, 64)
    batch = torch.randn(32, 64)
    record = probe.compute_window(model, lambda: model(batch).sum().backward(), torch.device("cpu"), seconds=0.05)
    assert set(record) == set(probe.COMPUTE_KEYS)
    assert record["compute_ms_per_step"] > 0
    assert all(p.grad is None for p in model.parameters())


def test_compute_window_is_time_boxed_and_at_least_three_steps():
    slow = probe.compute_window(torch.nn.Linear(1, 1), lambda: time.sleep(0.05), torch.device("cpu"), seconds=0.01)
    assert slow["compute_steps"] == probe.COMPUTE_MIN_STEPS  # 3 steps although the box is 10 ms
    fast = probe.compute_window(torch.nn.Linear(1, 1), lambda: time.sleep(0.001), torch.device("cpu"), seconds=0.3)
    assert fast["compute_seconds"] >= 0.3 and fast["compute_steps"] > 30  # many steps at 1 ms a step
    assert math.isclose(fast["compute_ms_per_step"] * fast["compute_steps"], fast["compute_seconds"] * 1000)


def test_compute_window_mean_shows_a_rank_slowed_in_bursts():
    """A rank stalled 40 ms every 10th step of 1 ms (throttling, the local cluster's slow node): its
    median step looks healthy, its mean is about 5x a healthy rank's; the mean is what is reported."""
    calls = iter(range(10**6))
    bursty = probe.compute_window(
        torch.nn.Linear(1, 1), lambda: time.sleep(0.041 if next(calls) % 10 == 9 else 0.001), torch.device("cpu"),
        seconds=0.4, warmup=0,
    )
    steady = probe.compute_window(torch.nn.Linear(1, 1), lambda: time.sleep(0.001), torch.device("cpu"), seconds=0.2)
    # The stalls add 4 ms to the mean step (40 ms every 10th), a median would add none. Compared as a
    # difference, not a ratio: a loaded host's late wake-ups add the same to every sleep of both
    # windows, which shrinks a ratio (5+d)/(1+d) below 3 once d passes 1 ms, but not the difference.
    added_ms = bursty["compute_ms_per_step"] - steady["compute_ms_per_step"]
    assert added_ms > 2, (added_ms, bursty, steady)


def test_metrics_record_the_device_asked_for_and_the_gpus_seen(capfd, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    reporter = metric_lines.Reporter("bert", Session(DistEnv("torchrun", 1, 1, 2, 2, 1, 0), torch.device("cpu"), "gloo",
                                               "cpu"), {})
    reporter.finish({})
    [record] = lines(capfd.readouterr().out, metric_lines.METRICS_PREFIX)
    assert {k: record[k] for k in ("device", "backend", "device_requested", "gpus_visible", "gpus_per_node",
                                   "local_world_size", "gpu_name")} == {
        "device": "cpu", "backend": "gloo", "device_requested": "cpu", "gpus_visible": 0, "gpus_per_node": 1,
        "local_world_size": 2, "gpu_name": None}
