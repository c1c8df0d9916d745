"""A pod that died because its workload found no usable GPU: the failure message names the
workloads' own line (CUDA missing, fewer GPUs than ranks, a rank without a GPU, a GPU that fails
its first allocation), the pod and its node, so ACCELERATOR=nvidia on a node with a broken driver
fails saying so instead of pointing at a log excerpt.

The markers are the fixed parts of workloads.distributed.require_cuda's messages (a unit test
holds them to that source: the harness does not import the workloads, which need torch)."""

from __future__ import annotations

from collections.abc import Iterable

from harness.cluster.logs import CapturedLog

NO_GPU_MARKERS = ("CUDA is required", "GPUs but torch.cuda.device_count()", "has no GPU", "visible but unusable")
SHOWN_LINE = 400  # characters of the workload's line quoted in the message
READ_LIMIT = 4 * 1024 * 1024  # bytes of a log's tail searched: the line is among a failing rank's last words


def no_gpu_line(entry: CapturedLog) -> str | None:
    """The first line of the log that says the workload found no usable GPU, or None."""
    if not entry.path.exists():
        return None
    with entry.path.open("rb") as handle:
        handle.seek(max(0, entry.path.stat().st_size - READ_LIMIT))
        text = handle.read().decode("utf-8", errors="replace")
    for line in text.splitlines():
        if any(marker in line for marker in NO_GPU_MARKERS):
            return line.strip()[:SHOWN_LINE]
    return None


def explain_no_gpu(message: str, logs: Iterable[CapturedLog], blamed_pod: str | None) -> str | None:
    """The failure message naming the no-GPU line, its pod and node (the blamed pod's first, else
    any pod's), or None when no log has such a line."""
    found = [(entry, line) for entry in logs if (line := no_gpu_line(entry)) is not None]
    if not found:
        return None
    found.sort(key=lambda item: item[0].pod != blamed_pod)
    entry, line = found[0]
    others = sorted({e.pod for e, _ in found} - {entry.pod})
    more = f" (also in {len(others)} other pod{'s' * (len(others) > 1)}: {', '.join(others[:5])})" if others else ""
    return (f"{message}: no usable GPU: pod {entry.pod} on node {entry.node} says: {line!r}{more}; "
            "ACCELERATOR=nvidia needs CUDA and a GPU for every rank on the node (driver, device plugin, runtime)")
