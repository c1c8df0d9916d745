"""TestNvidiaDriverCapabilities (upstream's capabilities_test.go)."""

from __future__ import annotations

from harness.cluster.manifests import script_text
from harness.framework.context import TestContext
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from testbins.nvidia.common import require_gpus

# upstream's nvidia-driver-capabilities-check.yaml: load every capability the driver enables.
CAPABILITIES_IMAGE = "public.ecr.aws/ubuntu/ubuntu:22.04"
CAPABILITIES_SCRIPT = script_text("driver-capabilities-check.sh")


# What upstream's script (apt-get update and install, pip) needs of root, with every other capability
# dropped: apt runs its download methods as the `_apt` user and dpkg unpacks as root.
APT_CAPABILITIES = (
    "CHOWN",  # apt chowns its partial/ download folders to _apt; dpkg chowns unpacked files to their owners
    "SETUID",  # apt's methods drop to _apt (setresuid)
    "SETGID",  # ... and to its group, clearing root's supplementary groups (setgroups)
    "DAC_OVERRIDE",  # root then reads and moves the files _apt wrote in the folders it owns (mode 0700)
    "FOWNER",  # dpkg sets modes and times of files it no longer owns once chowned
    "KILL",  # apt stops its methods, processes of another user (_apt)
)


def test_nvidia_driver_capabilities(t: TestContext) -> None:
    """With NVIDIA_DRIVER_CAPABILITIES=all a pod loads every driver capability (ModernGL over EGL);
    a missing library fails it."""
    require_gpus(t)
    job = launch(t, Workload("moderngl-pod", binary="/bin/bash", args=("-c", CAPABILITIES_SCRIPT),
                             image=CAPABILITIES_IMAGE, launcher="per-node", nodes=1,
                             extra_env={"NVIDIA_DRIVER_CAPABILITIES": "all"}, capabilities=APT_CAPABILITIES))
    t.assessment("Check Pod becomes ready", job.wait_succeeded)


