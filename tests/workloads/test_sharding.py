"""nanoGPT's GPT-2 sizes up to XL, their memory plan, and FSDP training against DDP's, on CPU for real."""

from __future__ import annotations

import re

import pytest
from workload_runs import assert_reported, run_python

torch = pytest.importorskip("torch")

from workloads import nanogpt, sharding  # noqa: E402

pytestmark = pytest.mark.workloads

GIB = sharding.GIB
# nanoGPT's model.py from_pretrained: 124M, 350M, 774M, 1558M (with its biases and vocabulary 50257).
NANOGPT_PARAMS = {"gpt2": 124e6, "gpt2-medium": 350e6, "gpt2-large": 774e6, "gpt2-xl": 1558e6}


@pytest.mark.parametrize("size", sorted(NANOGPT_PARAMS))
def test_the_gpt2_sizes_have_nanogpts_parameter_counts(size):
    total = sharding.meta_model(nanogpt.SIZES[size].model).num_params(non_embedding=False)
    # Within 1.5%: no biases and the vocabulary padded to 50304 move the count by under 1.3%.
    assert total == pytest.approx(NANOGPT_PARAMS[size], rel=0.015), total


def test_gpt2_xl_is_within_one_percent_of_1_56_billion():
    total = sharding.meta_model(nanogpt.SIZES["gpt2-xl"].model).num_params(non_embedding=False)
    assert total == 1_556_840_000
    assert abs(total - 1.56e9) / 1.56e9 < 0.01


def plan(size: str, world_size: int, device_gib: float | None, requested: str = "auto") -> sharding.MemoryPlan:
    spec = nanogpt.SIZES[size]
    device = None if device_gib is None else int(device_gib * GIB)
    return sharding.plan_memory(sharding.meta_model(spec.model), spec.batch_size, world_size, "bf16", device,
                                requested)


def test_the_plan_shards_only_where_a_replica_does_not_fit():
    assert plan("gpt2-xl", 16, 80).strategy == "ddp"  # 37.8 GiB a replica: an H100 holds it
    on_a100_40 = plan("gpt2-xl", 8, 40)
    assert on_a100_40.strategy == "fsdp" and on_a100_40.fits
    assert on_a100_40.fsdp_bytes < on_a100_40.ddp_bytes
    assert "a 1/8 shard does" in on_a100_40.line()
    # One rank: shards are the whole model, so FSDP cannot help; DDP, said not to fit.
    alone = plan("gpt2-xl", 1, 24)
    assert alone.strategy == "ddp" and alone.fits is False and "neither fits" in alone.why
    unknown = plan("gpt2-xl", 8, None)
    assert unknown.strategy == "ddp" and unknown.fits is None and "unknown" in unknown.line()
    assert plan("tiny", 2, 80, requested="fsdp").strategy == "fsdp"
    with pytest.raises(sharding.PlanError, match="not one of auto, ddp, fsdp"):
        plan("tiny", 2, 80, requested="zero3")


def test_the_estimate_grows_with_what_training_keeps():
    small, large = plan("gpt2-xl", 8, 40), plan("gpt2-large", 8, 40)
    assert small.ddp_bytes > large.ddp_bytes
    spec = nanogpt.SIZES["gpt2-xl"]
    model = sharding.meta_model(spec.model)
    double = sharding.plan_memory(model, 2 * spec.batch_size, 8, "bf16", 40 * GIB)
    activations = sharding.activation_bytes(spec.model, spec.batch_size, "bf16")
    assert double.ddp_bytes - small.ddp_bytes == activations  # a micro-batch more is its activations
    wider = sharding.plan_memory(model, spec.batch_size, 16, "bf16", 40 * GIB)
    assert wider.fsdp_bytes < small.fsdp_bytes and wider.ddp_bytes == small.ddp_bytes


def test_plan_prints_the_xl_parameter_count_and_plan_without_training():
    proc = run_python("-m", "workloads.nanogpt", "--size", "gpt2-xl", "--plan", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "gpt2-xl: 1556.84M parameters (1555.20M without position embeddings" in proc.stdout
    assert re.search(r"^memory plan: 1556\.84M parameters, micro-batch 2, .* (ddp|fsdp) \(", proc.stdout, re.M)
    assert "KT2T_STEP" not in proc.stdout and "KT2T_METRICS" not in proc.stdout
    planned = run_python("-m", "workloads.nanogpt", "--size", "gpt2-xl", "--plan", "--plan-world-size", "8",
                         "--plan-device-gib", "40", timeout=120)
    assert planned.returncode == 0 and "8 ranks" in planned.stdout and ": fsdp (" in planned.stdout, planned.stdout


def test_checkpoints_under_fsdp_are_refused_naming_both_flags():
    proc = run_python("-m", "workloads.nanogpt", "--size", "tiny", "--sharding", "fsdp", "--checkpoint-dir", "/tmp/x",
                      timeout=60)
    assert proc.returncode == 2 and "--checkpoint-dir with --sharding fsdp" in proc.stderr, proc.stderr


TINY = ("--size", "tiny", "--max-iters", "6", "--warmup-iters", "1")


@pytest.mark.timeout(300)
def test_fsdp_trains_the_same_model_as_ddp(torchrun, tmp_path):
    """Same seed, same batches: the first losses are equal and the later ones agree to float noise, so
    FSDP's shards really compute and reduce what DDP's replicas do."""
    runs = {s: torchrun("nanogpt", *TINY, "--sharding", s) for s in ("ddp", "fsdp")}
    assert all(run.returncode == 0 for run in runs.values()), {s: run.explain() for s, run in runs.items()}
    metrics = {s: assert_reported(run, "nanogpt", training=True) for s, run in runs.items()}
    for strategy, records in metrics.items():
        assert {m["sharding"] for m in records} == {strategy}, records
        assert f"{strategy} (asked for (--sharding))" in runs[strategy].stdout
    ddp, fsdp = (sorted(metrics[s], key=lambda m: m["rank"]) for s in ("ddp", "fsdp"))
    for a, b in zip(ddp, fsdp, strict=True):
        assert a["loss_first"] == pytest.approx(b["loss_first"], rel=1e-6), (a, b)
        assert a["loss_last"] == pytest.approx(b["loss_last"], rel=1e-4), (a, b)
        # 1e-5: reduction order only. The compute window's unsynced gradients once leaked into FSDP's first
        # step (unsharded buffers zero_grad() leaves) and moved the sum by 5e-3: this caught it.
        assert a["params_checksum"] == pytest.approx(b["params_checksum"], rel=1e-5), (a, b)
    assert len({m["params_checksum"] for m in fsdp}) == 1


@pytest.mark.full
@pytest.mark.timeout(900)
def test_one_fsdp_step_of_gpt2_medium_on_cpu(torchrun):
    """The full tier: a real optimizer step of the 354M model, sharded over two CPU ranks (a shorter
    block keeps it to minutes on 2 cores; the parameters are medium's but for the position embeddings)."""
    run = torchrun("nanogpt", "--size", "gpt2-medium", "--sharding", "fsdp", "--max-iters", "1", "--batch-size", "1",
                   "--grad-accum", "1", "--block-size", "64", "--warmup-iters", "0", timeout=840)
    assert run.returncode == 0, run.explain()
    records = assert_reported(run, "nanogpt", training=False)  # one step: no loss can fall yet
    assert all(m["sharding"] == "fsdp" and m["steps_completed"] == 1 for m in records), records
    assert re.search(r"^memory plan: 353\.6\dM parameters, micro-batch 1, .*: fsdp \(", run.stdout, re.M), run.stdout
    assert len({m["params_checksum"] for m in records}) == 1


def test_every_size_the_suite_asks_nanogpt_for_exists():
    from testbins.nvidia_training.common import SIZES

    assert set(SIZES["nanogpt"].values()) <= set(nanogpt.SIZES), SIZES["nanogpt"]
