"""Elastic recovery: a rank dies mid-run, torchrun restarts the group, training resumes from the
latest checkpoint and completes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.workloads


@pytest.mark.timeout(300)
def test_nanogpt_resumes_after_rank_failure(torchrun, tmp_path):
    run = torchrun(
        "nanogpt",
        "--size",
        "tiny",
        "--max-iters",
        "40",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--checkpoint-every",
        "10",
        "--fail-at-step",
        "25",
        torchrun_args=("--max_restarts=1",),
        # Without it elastic restarts over gloo are flaky on torch 2.14+ (pytorch issue 135712).
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        timeout=240,
    )
    assert run.returncode == 0, run.explain()
    assert "injected failure before step 25" in run.stderr
    # the line the harness follows to know a checkpoint exists (first attempt: 10, 20; then 30, 40)
    saved = [int(ln.rsplit(" ", 1)[1]) for ln in run.stdout.splitlines() if ln.startswith("saved checkpoint at step ")]
    assert saved == [10, 20, 30, 40], run.explain()
    # Checkpoints at 10 and 20; step 25 was never saved, so the new attempt starts at 20.
    assert run.stdout.count("resumed from step 20") == 1, run.explain()  # rank 0 only
    lines = run.stdout.splitlines()
    resumed_at = lines.index("resumed from step 20")
    [first_iter_after] = [ln for ln in lines[resumed_at:] if ln.startswith("iter ")][:1]
    assert first_iter_after.startswith("iter 20: ")
    metrics = run.metrics
    assert [m["rank"] for m in metrics] == [0, 1], run.explain()  # the failed attempt never got this far
    for m in metrics:
        assert m["restart_count"] == 1
        assert m["resumed_from_step"] == 20
        assert m["iterations"] == 20 and m["final_step"] == 40
        assert m["steps_requested"] == m["steps_completed"] == 40  # counted over the whole job
    assert len({m["params_checksum"] for m in metrics}) == 1
    # Both attempts printed their step lines: 0..24 (rank 1 died before 25), then 20..39 again.
    for rank, records in run.steps.items():
        steps = [r["step"] for r in records]
        assert steps[-20:] == list(range(20, 40)), (rank, steps)
        assert steps[0] == 0 and set(steps[:-20]) <= set(range(25)), (rank, steps)
