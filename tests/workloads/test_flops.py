"""workloads/flops.py against torch's own FLOP counter on a real forward+backward of each model."""

from __future__ import annotations

import json
import math

import pytest
from workload_runs import run_python

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from workloads import bert, flops, mnist, nanogpt  # noqa: E402
from workloads.gpt import GPT  # noqa: E402

pytestmark = pytest.mark.workloads


def counted(step) -> int:
    """FLOPs torch counts for one call of step (matmuls, convolutions, attention)."""
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


@pytest.mark.parametrize("size", ["tiny", "base"])
def test_bert_flops_match_torch_count(size):
    spec = bert.SIZES[size]
    torch.manual_seed(0)
    model = bert.PretrainingLoss(bert.build_model(size, torch.device("cpu")))
    batch = bert.synthetic_batch(model.model.config.vocab_size, 2, spec.seq_len, torch.Generator().manual_seed(1))
    masked = float((batch["labels"] != bert.IGNORE).sum()) / 2
    measured = counted(lambda: model(**batch).backward()) / 2
    expected, _ = flops.bert_flops_per_sample(spec.config, spec.seq_len, masked)
    assert math.isclose(measured, expected, rel_tol=0.02), (measured, expected)


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_gpt_flops_match_torch_count_and_the_model(size):
    cfg = nanogpt.SIZES[size].model
    model = GPT(cfg)
    assert flops.gpt_flops_per_token(cfg) == model.flops_per_token()
    idx = torch.randint(0, cfg.vocab_size, (1, cfg.block_size))
    measured = counted(lambda: model(idx, idx).backward()) / cfg.block_size
    # Exactly nanoGPT's estimate but for two kernel details: the attention backward recomputes
    # Q K^T (one more T x T x n_embd product a layer), and 6N counts the LayerNorm gains, which
    # are no matmul (2 a block and ln_f, n_embd each).
    recompute = cfg.n_layer * 2 * cfg.block_size * cfg.n_embd
    norm_gains = 6 * (2 * cfg.n_layer + 1) * cfg.n_embd
    assert measured == flops.gpt_flops_per_token(cfg) + recompute - norm_gains, (measured, cfg)


def test_gpt2_parameter_count_is_nanogpts():
    cfg = nanogpt.SIZES["gpt2"].model
    with torch.device("meta"):
        model = GPT(cfg)
    # nanoGPT's 124M has biases and vocab 50257; without biases, vocab padded to 50304: 123.6M.
    assert flops.gpt_params(cfg) == model.num_params() == 123_587_328


def test_mnist_flops_match_torch_count():
    net = mnist.Net()
    images = torch.randn(4, 1, 28, 28)
    measured = counted(lambda: net(images).sum().backward()) / 4
    macs, params = flops.mnist_forward_macs()
    assert params == sum(p.numel() for p in net.parameters() if p.dim() > 1)
    # Torch skips conv1's input gradient (the images need none): 2 x conv1's MACs fewer.
    assert math.isclose(measured, 3 * 2 * macs - 2 * 26 * 26 * 32 * 9, rel_tol=1e-9), (measured, macs)


def test_the_table_covers_every_workload_size():
    rows = {(r.workload, r.size): r for r in flops.table()}
    assert set(rows) == {("bert", s) for s in bert.SIZES} | {("nanogpt", s) for s in nanogpt.SIZES} | {
        ("mnist", s) for s in mnist.SIZES}
    # GPT-2 at block 1024, nanoGPT's estimate: 6N + 12 x layers x n_embd x block per token.
    assert rows["nanogpt", "gpt2"].flops_per_unit == 6 * 123_587_328 + 12 * 12 * 768 * 1024


def test_the_command_prints_every_row():
    proc = run_python("-m", "workloads.flops", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["workload"], r["size"]) for r in printed] == [(r.workload, r.size) for r in flops.table()]
