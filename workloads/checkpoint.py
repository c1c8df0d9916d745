"""Training checkpoints: atomic writes by each node's local rank 0; the newest handed to every rank on resume."""

from __future__ import annotations

import os
import re
import tempfile
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
    """Write atomically (temp file + rename), so a crash mid-write never leaves a torn 'latest'. The
    temp file's name is unique to this writer (mkstemp), not its pid: the local rank 0 of every node
    writes here, and where two nodes' pods share the folder (the local cluster's real nodes share
    one host's /var/tmp) both had pid 22, renamed one file twice and one rank failed (FileNotFoundError)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = _path(directory, step)
    handle, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=directory)
    os.close(handle)
    tmp = Path(name)
    try:
        torch.save(state, tmp)
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    steps = sorted(int(m.group(1)) for name in os.listdir(directory) if (m := _NAME.match(name)))
    for old in steps[:-KEEP]:
        _path(directory, old).unlink(missing_ok=True)
    return final


def load_latest_everywhere(directory: Path) -> dict[str, Any] | None:
    """The newest checkpoint any rank can see, read by one rank and broadcast to all.

    Every node's local rank 0 saves into its own directory, and after an elastic restart global
    ranks may land on other nodes, so rank 0 alone may have nothing: each rank reports the newest
    step it sees, the lowest rank holding the overall newest reads it, and a broadcast hands it to
    the others, so no shared volume is needed. A collective: every rank must call it. Returns None
    when no rank has anything to resume from.
    """
    seen: list[int | None] = [None] * dist.get_world_size()
    dist.all_gather_object(seen, latest_step(directory))
    newest = max((s for s in seen if s is not None), default=None)
    if newest is None:
        return None
    source = seen.index(newest)
    box: list[dict[str, Any] | None] = [None]
    if dist.get_rank() == source:
        box[0] = torch.load(_path(directory, newest), map_location="cpu", weights_only=True)
    dist.broadcast_object_list(box, src=source)  # staged through the current CUDA device under NCCL
    return box[0]
