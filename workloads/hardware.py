"""What the hardware offers: bf16 peak FLOPS per GPU model, bf16 autocast support, the best AdamW."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import torch

# Dense (no sparsity) bf16 tensor-core peaks per GPU, in FLOP/s. The single place MFU reads from.
# Sources: torchtitan torchtitan/tools/utils.py get_peak_flops, which cites the NVIDIA datasheets
# nvidia.com/en-us/data-center/{a100,h100,h200}/ and the Blackwell datasheet. Order matters: the
# first entry whose every substring occurs in torch.cuda.get_device_name() wins, so the H100
# variants come before plain "H100".
PEAK_BF16_FLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("A100",), 312e12),
    (("H100", "NVL"), 835e12),
    (("H100", "PCIe"), 756e12),
    (("H100",), 989e12),  # SXM (reported as e.g. "NVIDIA H100 80GB HBM3")
    (("H200",), 989e12),
    (("GB200",), 2.5e15),  # before "B200", which is a substring of "GB200"
    (("B200",), 2.25e15),
)


def peak_bf16_flops(device_name: str) -> float | None:
    """The GPU's bf16 peak, or None for a GPU not in the table (MFU is then not computed)."""
    for needles, flops in PEAK_BF16_FLOPS:
        if all(needle in device_name for needle in needles):
            return flops
    return None


def device_peak_flops(device: torch.device) -> float | None:
    """Peak of the GPU actually present; None on CPU, where a FLOPS peak is not meaningful."""
    if device.type != "cuda":
        return None
    return peak_bf16_flops(torch.cuda.get_device_name(device))


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 math (AVX512-BF16 or AMX); without it autocast is slower."""
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def bf16_supported(device: torch.device) -> bool:
    """Native bf16 math on the device. Not emulation: torch.cuda.is_bf16_supported() says True on a
    V100 (p3), which has no bf16 tensor cores, and bf16 autocast there runs far below fp32's speed."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return cpu_supports_bf16()


def resolve_precision(requested: str, device: torch.device) -> str:
    """'auto' means bf16 wherever the hardware does it natively, else fp32."""
    if requested == "auto":
        return "bf16" if bf16_supported(device) else "fp32"
    return requested


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CPU as well as GPU (nanoGPT's train.py skips it on CPU and loses ~2x there)."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def adamw(
    params: Iterable[torch.Tensor] | Iterable[dict[str, object]],
    device: torch.device,
    lr: float,
    **kwargs: object,
) -> torch.optim.AdamW:
    """AdamW with the fused kernel where torch has one for the device (one launch per step on GPU)."""
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(params, lr=lr, fused=fused, **kwargs)  # type: ignore[arg-type]


def allow_tf32(device: torch.device) -> None:
    """Let fp32 matmuls that autocast leaves in fp32 use TF32 tensor cores (nanoGPT does the same)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
