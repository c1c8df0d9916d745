"""TestSharedLibraries (upstream's test/cases/nvidia-shared-libraries)."""

from __future__ import annotations

from harness.framework.context import TestContext
from testbins.nvidia_node.common import NodeCheck, run_check

# upstream's image: its ldconfig reads the cache the NVIDIA container runtime writes.
SHARED_LIBRARIES_IMAGE = "public.ecr.aws/amazonlinux/amazonlinux:2023"
SHARED_LIBRARIES = NodeCheck(
    "shared_libraries", "nvidia-shared-libraries-check", "shared-libraries-check.sh",
    "=== all required NVIDIA driver libraries resolve under the allowed folders ===")


def test_shared_libraries(t: TestContext) -> None:
    """A pod with a GPU on every GPU node: each of --requiredLibs is in the ld.so cache, every path it
    resolves to under --allowedLibDirsRegex."""
    env = {"REQUIRED_LIBS": t.cfg.required_libs, "ALLOWED_LIB_DIRS_RE": t.cfg.allowed_lib_dirs_regex}
    run_check(t, SHARED_LIBRARIES, "all DaemonSet pods are Ready and the DS has at least one pod",
              test_image=SHARED_LIBRARIES_IMAGE, gpus=1, env=env)
