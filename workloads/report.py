"""The machine-readable end-of-run line every workload prints on every rank (`KT2T_METRICS {json}`)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable

import torch

from workloads.distributed import Session, node_name

METRICS_PREFIX = "KT2T_METRICS "


def say(line: str) -> None:
    """Print a line the harness parses as one write(2) on fd 1.

    Ranks of one pod share the pipe; print() may issue the text and the newline as separate
    writes, so two ranks' lines could interleave mid-line. A single write below PIPE_BUF (4 KiB)
    is atomic on a pipe.
    """
    sys.stdout.flush()  # keep ordering with anything print()ed before
    data = (line + "\n").encode("utf-8", errors="replace")
    while data:
        data = data[os.write(sys.stdout.fileno(), data) :]


def params_checksum(parameters: Iterable[torch.Tensor]) -> float:
    """Sum of every parameter in float64, in a fixed order.

    After DDP every rank holds bit-identical parameters, so equal checksums across ranks are the
    cheap proof that gradients really were all-reduced; any divergence shows in the low bits.
    """
    total = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for p in parameters:
            total += p.detach().to(device="cpu", dtype=torch.float64).sum()
    return float(total.item())


def _finite_or_none(value: object) -> object:
    # JSON has no NaN/Infinity; a diverged loss must still give a parseable line.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit_metrics(workload: str, session: Session, metrics: dict[str, object]) -> None:
    """Print one compact `KT2T_METRICS {json}` line with the rank's identity and its metrics."""
    record: dict[str, object] = {
        "workload": workload,
        "rank": session.env.rank,
        "world_size": session.env.world_size,
        "local_rank": session.env.local_rank,
        "node": node_name(),
        "device": str(session.device),
        "backend": session.backend,
        "launcher": session.env.launcher,
        "restart_count": session.env.restart_count,
    }
    record.update({key: _finite_or_none(value) for key, value in metrics.items()})
    say(METRICS_PREFIX + json.dumps(record, separators=(",", ":"), allow_nan=False))
