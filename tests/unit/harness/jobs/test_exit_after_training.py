"""Issue 18 point 3: a rank whose pod fails after it printed its KT2T_METRICS is still a failure, but
the message says training completed and how the process ended at exit."""

from __future__ import annotations

from harness.cluster.logs import CapturedLog
from harness.jobs.exit_after_training import explain

from ...crafted_logs import metrics_line, metrics_record

FAILED = "pod nanogpt-training-0-abc on node kwok-cpu-0 failed: container worker exited with code 1 (Error)"
TORCHRUN_ABORT = """\
terminate called without an active exception
[E1201 10:00:00] failed (exitcode: -6) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3
Root Cause (first observed failure): rank 1 (local_rank: 1) exitcode -6 (SIGABRT)
"""


def log(tmp_path, text: str) -> list[CapturedLog]:
    path = tmp_path / "nanogpt-training-0-abc.log"
    path.write_text("=== pod nanogpt-training-0-abc | node kwok-cpu-0 | container worker\n" + text)
    return [CapturedLog("nanogpt-training-0-abc", "kwok-cpu-0", "worker", path)]


def pod(exit_code: int) -> dict:
    return {"metadata": {"name": "nanogpt-training-0-abc"}, "status": {"containerStatuses": [
        {"name": "worker", "state": {"terminated": {"exitCode": exit_code}}}]}}


def test_torchrun_sigabrt_after_metrics_says_training_completed(tmp_path):
    text = "\n".join(metrics_line(metrics_record(r, 2, "nanogpt")) for r in (0, 1)) + "\n" + TORCHRUN_ABORT
    message = explain(FAILED, log(tmp_path, text), pod(1))
    assert message.startswith(FAILED + ": training completed (ranks 0, 1 printed KT2T_METRICS, first at "
                              "nanogpt-training-0-abc.log:2), then the process aborted at exit (")
    assert "container worker exit code 1" in message
    assert "SIGABRT ('terminate called without an active exception')" in message
    assert "SIGABRT (exitcode: -6)" in message
    assert message.endswith("not a training failure, and still fails the test")


def test_mpirun_and_container_signals_are_named(tmp_path):
    text = ("[1,0]<stdout>:" + metrics_line(metrics_record(0, 1)) + "\n"
            "mpirun noticed that process rank 0 with PID 0 on node w-0 exited on signal 6 (Aborted).\n")
    message = explain("pod bert-launcher failed", log(tmp_path, text), pod(134))
    assert "(rank 0 printed KT2T_METRICS" in message
    assert "container worker exit code 134, SIGABRT; SIGABRT (exited on signal 6)" in message


def test_a_pod_that_failed_before_its_metrics_keeps_its_message(tmp_path):
    assert explain(FAILED, log(tmp_path, "Traceback (most recent call last):\nKeyError: 'x'\n"), pod(1)) == FAILED
