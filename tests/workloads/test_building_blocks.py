"""In-process checks of the pieces the workloads share: rank reading, peaks, sizes, checkpoints."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from workloads import checkpoint, hardware  # noqa: E402 - after the torch skip
from workloads.allreduce import bus_factor, parse_bytes  # noqa: E402
from workloads.bert import FIRST_TOKEN, IGNORE, MASK_ID, PretrainingLoss, build_model, synthetic_batch  # noqa: E402
from workloads.distributed import EnvError, read_env  # noqa: E402
from workloads.gpt import GPT, GPTConfig  # noqa: E402

pytestmark = pytest.mark.workloads

TORCHRUN = {
    "RANK": "3",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "NUM_GPUS_PER_NODE": "2",
}


def test_torchrun_variables():
    env = read_env(TORCHRUN | {"TORCHELASTIC_RESTART_COUNT": "1"})
    assert (env.launcher, env.rank, env.local_rank, env.world_size, env.local_world_size) == ("torchrun", 3, 1, 8, 2)
    assert env.gpus_per_node == 2 and env.restart_count == 1


def test_openmpi_variables_and_upstream_local_rank_fallback():
    mpi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}
    env = read_env(mpi | {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"})
    assert (env.launcher, env.rank, env.local_rank, env.world_size, env.local_world_size) == ("openmpi", 5, 1, 16, 8)
    # train.py's rule, rank % NUM_GPUS_PER_NODE, only when mpirun did not say
    assert read_env(mpi | {"NUM_GPUS_PER_NODE": "4"}).local_rank == 1


def test_no_launcher_is_a_single_process():
    env = read_env({})
    assert (env.launcher, env.rank, env.world_size) == ("single", 0, 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"RANK": None}, "RANK is not set"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
        ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x' is not an integer"),
        ({"MASTER_PORT": ""}, "MASTER_PORT is not set"),
        ({"NUM_GPUS_PER_NODE": "-1"}, "NUM_GPUS_PER_NODE='-1' must be >= 0"),
    ],
)
def test_bad_variables_are_named(change, message):
    env = {k: v for k, v in (TORCHRUN | change).items() if v is not None}
    with pytest.raises(EnvError, match=f"^{message}$"):
        read_env(env)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA GB200", 2.5e15),
        ("Tesla V100-SXM2-16GB", None),  # unknown: MFU is reported as n/a, not against an A100
    ],
)
def test_peak_table(name, peak):
    assert hardware.peak_bf16_flops(name) == peak


def test_cpu_has_no_peak():
    assert hardware.device_peak_flops(torch.device("cpu")) is None


def test_sizes_and_bus_factor():
    assert [parse_bytes(s) for s in ("8", "64K", "128M", "2G")] == [8, 64 << 10, 128 << 20, 2 << 30]
    assert bus_factor(1) == 0 and bus_factor(2) == 1 and bus_factor(8) == pytest.approx(1.75)


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    for step in (10, 20, 30):
        checkpoint.save(tmp_path, step, {"step": step})
    assert checkpoint.latest_step(tmp_path) == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_00000020.pt", "ckpt_00000030.pt"]
    assert checkpoint.latest_step(tmp_path / "missing") is None


def test_bert_batch_is_well_formed_and_learnable():
    batch = synthetic_batch(99, 4, 32, torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape == (4, 32)
    labels = batch["labels"]
    masked = labels != IGNORE
    assert masked.any() and (labels[masked] >= FIRST_TOKEN).all()
    assert (batch["input_ids"] == MASK_ID).any()
    assert set(batch["next_sentence_label"].tolist()) <= {0, 1}


def test_gpt_first_loss_is_uniform_and_flops_follow_palm():
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65)
    model = GPT(cfg)
    idx, targets = torch.randint(0, 65, (2, 4, 16))
    # (targets differ from inputs: with tied embeddings the input token itself scores higher)
    assert model(idx, targets).item() == pytest.approx(math.log(65), abs=0.05)
    assert model.flops_per_token() == 6 * model.num_params() + 12 * 2 * 2 * 16 * 16


def test_bert_masked_only_loss_equals_transformers_loss():
    torch.manual_seed(0)
    model = build_model("tiny", torch.device("cpu")).eval()  # eval: no dropout, so both are deterministic
    batch = synthetic_batch(99, 8, 32, torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert PretrainingLoss(model)(**batch).item() == pytest.approx(model(**batch).loss.item(), abs=1e-5)


def test_two_writers_with_one_pid_never_share_a_temp_file(tmp_path, monkeypatch):
    # The local cluster's real nodes share one host's checkpoint folder and both ranks ran as pid 22:
    # a pid-named temp file was renamed twice and one rank failed (FileNotFoundError).
    monkeypatch.setattr(checkpoint.os, "getpid", lambda: 22)
    written: list[str] = []
    real_save = checkpoint.torch.save

    def save(state, path):
        written.append(str(path))
        real_save(state, path)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    checkpoint.save(tmp_path, 5, {"step": 5})
    checkpoint.save(tmp_path, 5, {"step": 5})
    assert len(set(written)) == 2, written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_00000005.pt"]  # no temp file left
