"""Model FLOPs per sample (per token for nanoGPT) of every training workload and size, from the configs.

`python -m workloads.flops` prints the table; harness floors divide a GPU's peak x a minimum MFU by
these figures. Training FLOPs are 3 x the forward pass's matmul FLOPs (backward: 2 x forward),
2 FLOPs per multiply-add; element-wise work, norms, softmax and embedding lookups are left out, as
in every MFU figure (PaLM appendix B, nanoGPT's estimate_mfu, llm.c). The counts follow what the
workloads run: BERT's vocabulary projection on the masked positions only (workloads/bert.py
PretrainingLoss), full (non-causal) attention over seq_len; GPT counted as nanoGPT counts it
(workloads/gpt.py flops_per_token: 6N + 12*L*H*Q*T, N with the tied lm_head, T = block_size);
the MNIST CNN layer by layer. tests/workloads/test_flops.py checks each against torch's
FlopCounterMode on a real forward+backward.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from workloads import bert, mnist, nanogpt
from workloads.gpt import GPTConfig

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072)  # transformers' BertConfig defaults: bert-base-uncased
MLM_FRACTION = 0.15  # workloads/bert.py synthetic_batch: 15% of the real tokens carry a label


@dataclass(frozen=True)
class Flops:
    """One workload size's training FLOPs per unit of its throughput key."""

    workload: str
    size: str
    unit: str  # "sample" or "token"
    throughput_key: str  # the KT2T_METRICS key the floor applies to (per rank = per GPU)
    flops_per_unit: float
    units_per_step: int  # per rank, at the workload's default batch
    params: int  # parameters the matmuls use (N)


def bert_masked_tokens(seq_len: int) -> float:
    """Expected labelled positions per sequence: 15% of the 2*((seq_len-3)//2) real tokens."""
    return MLM_FRACTION * 2 * ((seq_len - 3) // 2)


def bert_flops_per_sample(config: dict[str, int], seq_len: int, masked: float | None = None) -> tuple[float, int]:
    """Training FLOPs of one sequence through BertForPreTraining as workloads.bert runs it, and N."""
    cfg = BERT_BASE | config
    h, layers, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    masked = bert_masked_tokens(seq_len) if masked is None else masked
    layer_macs = 4 * h * h + 2 * h * inter  # Q, K, V, output; FFN in and out (per token)
    attention_macs = 2 * seq_len * h  # QK^T and attention x V (per token, all seq_len keys)
    encoder = seq_len * layers * (layer_macs + attention_macs)
    heads = h * h + 2 * h + masked * (h * h + h * vocab)  # pooler, NSP, MLM transform + decoder
    forward_macs = encoder + heads
    params = layers * layer_macs + h * h + 2 * h + h * h + h * vocab
    return 3 * 2 * forward_macs, params


def gpt_params(cfg: GPTConfig) -> int:
    """nanoGPT's N (GPT.num_params(non_embedding=True)): wte (= the tied lm_head), the blocks'
    matrices and LayerNorm gains, ln_f; wpe left out; biases when cfg.bias."""
    h = cfg.n_embd
    per_block = 12 * h * h + 2 * h + (13 * h if cfg.bias else 0)  # c_attn 3h^2, c_proj h^2, MLP 8h^2
    return cfg.vocab_size * h + cfg.n_layer * per_block + h + (h if cfg.bias else 0)


def gpt_flops_per_token(cfg: GPTConfig) -> float:
    """workloads/gpt.py GPT.flops_per_token without building the model."""
    return 6 * gpt_params(cfg) + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size


def mnist_forward_macs() -> tuple[int, int]:
    """The SMDDP example's CNN (workloads/mnist.py Net) on one 28x28 image: MACs and N."""
    conv1 = 26 * 26 * 32 * (1 * 3 * 3)  # 1 -> 32 channels, 3x3, valid: 26x26 outputs
    conv2 = 24 * 24 * 64 * (32 * 3 * 3)  # 32 -> 64, 3x3: 24x24
    fc1 = 9216 * 128  # 64 x 12 x 12 after the 2x2 max-pool
    fc2 = 128 * mnist.NUM_CLASSES
    params = 32 * 9 + 64 * 32 * 9 + 9216 * 128 + 128 * mnist.NUM_CLASSES
    return conv1 + conv2 + fc1 + fc2, params


def table() -> list[Flops]:
    """Every training workload and size at its default batch (workloads' parse_args defaults)."""
    rows = []
    bert_batch = 8  # workloads/bert.py --batch-size default (upstream's 8)
    for size, spec in bert.SIZES.items():
        flops, params = bert_flops_per_sample(spec.config, spec.seq_len)
        rows.append(Flops("bert", size, "sample", "throughput", flops, bert_batch, params))
    for size, spec in nanogpt.SIZES.items():
        tokens = spec.batch_size * spec.grad_accum * spec.model.block_size
        rows.append(Flops("nanogpt", size, "token", "tokens_per_s", gpt_flops_per_token(spec.model), tokens,
                          gpt_params(spec.model)))
    macs, params = mnist_forward_macs()
    for size in mnist.SIZES:  # the sizes change the data, not the net
        rows.append(Flops("mnist", size, "sample", "samples_per_s", 3 * 2 * macs, 64, params))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table (`--json`: one JSON object per line)."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--json"]):
        print("usage: python -m workloads.flops [--json]", file=sys.stderr)
        return 2
    rows = table()
    if args:
        for row in rows:
            print(json.dumps(asdict(row)))
        return 0
    print(f"{'workload':8s} {'size':6s} {'unit':6s} {'key':13s} {'FLOPs/unit':>11s} {'units/step':>10s} "
          f"{'GFLOP/step':>10s} {'params':>11s}")
    for r in rows:
        print(f"{r.workload:8s} {r.size:6s} {r.unit:6s} {r.throughput_key:13s} {r.flops_per_unit:11.4g} "
              f"{r.units_per_step:10d} {r.flops_per_unit * r.units_per_step / 1e9:10.4g} {r.params:11d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
