"""e2e-nvidia-shared-libraries (also installed as nvidia-shared-libraries.test, upstream's name): upstream
aws-k8s-tester's test/cases/nvidia-shared-libraries suite under its test, feature and assessment names
(TestSharedLibraries; testbins/nvidia_node/shared_libraries.py).
"""

from __future__ import annotations

import sys

from harness.framework.suite import GPU, Suite
from harness.runner import main as run_suite
from testbins.nvidia_node import shared_libraries

SUITE = Suite("e2e-nvidia-shared-libraries", (
    "Upstream aws-k8s-tester's nvidia-shared-libraries suite: every GPU node's containers resolve the "
    "NVIDIA driver libraries (--requiredLibs) from the allowed folders (--allowedLibDirsRegex)."
    ), aliases=("nvidia-shared-libraries.test",))
SUITE.test("TestSharedLibraries", upstream=True, feature="nvidia-shared-libraries",
           launches="`manifests/scripts/shared-libraries-check.sh` in Amazon Linux 2023, a pod with one GPU on every "
           "node",
           checks=(shared_libraries.SHARED_LIBRARIES.kind,),
           settings=("REQUIRED_LIBS", "ALLOWED_LIB_DIRS_REGEX"),
           labels=GPU,
           assessments=("all DaemonSet pods are Ready and the DS has at least one pod",))(
    shared_libraries.test_shared_libraries)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
