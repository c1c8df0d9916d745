"""Training checkpoints: atomic writes by rank 0, and the latest one handed to every rank on resume."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

_NAME = re.compile(r"^ckpt_(\d{8})\.pt$")
KEEP = 2  # the newest two: one may be mid-write when a rank dies


def _path(directory: Path, step: int) -> Path:
    return directory / f"ckpt_{step:08d}.pt"


def latest_step(directory: Path) -> int | None:
    """The highest step with a complete checkpoint file in directory, or None."""
    if not directory.is_dir():
        return None
    steps = [int(m.group(1)) for name in os.listdir(directory) if (m := _NAME.match(name))]
    return max(steps, default=None)


def save(directory: Path, step: int, state: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename), so a crash mid-write never leaves a torn 'latest'."""
    directory.mkdir(parents=True, exist_ok=True)
    final = _path(directory, step)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, final)
    steps = sorted(int(m.group(1)) for name in os.listdir(directory) if (m := _NAME.match(name)))
    for old in steps[:-KEEP]:
        _path(directory, old).unlink(missing_ok=True)
    return final


def load_latest_everywhere(directory: Path, is_main: bool) -> dict[str, Any] | None:
    """Rank 0 reads the newest checkpoint and broadcasts it, so nodes need no shared volume.

    Every rank must call this (it is a collective). Returns None when there is nothing to resume.
    """
    state: dict[str, Any] | None = None
    if is_main:
        step = latest_step(directory)
        if step is not None:
            state = torch.load(_path(directory, step), map_location="cpu", weights_only=True)
    box: list[dict[str, Any] | None] = [state]
    dist.broadcast_object_list(box, src=0)  # staged through the current CUDA device under NCCL
    return box[0]
