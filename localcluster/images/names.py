"""The names of the images this project builds: the one place that says them.

Every image is tagged with the project's version (pyproject.toml), never `latest`: a tag no
registry serves, so nodes use what `hack/images build` imported (imagePullPolicy IfNotPresent or
Never). The references are fully qualified (`docker.io/...`) because that is what kubelet and
containerd's CRI turn a short name into: a pod's `kubetest2-training/workloads:0.1.0` is found as
`docker.io/kubetest2-training/workloads:0.1.0` in containerd's k8s.io namespace.

Read by hack/images (`hack/images name workloads`), by the real nodes (containerd's
`sandbox_image` = `reference("pause")`) and, later, by the harness's defaults (TRAINING_IMAGE,
NCCL_TESTS_IMAGE).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPOSITORY_PREFIX = "kubetest2-training"
# Kubernetes' and containerd's default registry for a name without one.
DEFAULT_REGISTRY = "docker.io"

# image -> what it is; the keys are the image names' last part.
IMAGES = {
    "workloads": "the training workloads (workloads/Dockerfile): TRAINING_IMAGE",
    "nccl-tests": "nccl-tests + OpenMPI against the workloads image's NCCL (images/nccl-tests/Dockerfile): "
                  "NCCL_TESTS_IMAGE",
    "kubetest2": "kubetest2 + this project's test binaries (Dockerfile.kubetest2)",
    "pause": "the pod sandbox (images/pause/pause.c): containerd's sandbox_image",
}


def version(pyproject: Path = REPO / "pyproject.toml") -> str:
    """The project's version, from pyproject.toml's [project] table."""
    match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{pyproject}: no `version = \"...\"` line (expected in [project])")
    return match.group(1)


def short_reference(image: str) -> str:
    """`kubetest2-training/<image>:<version>`: what a pod spec or a harness default says."""
    if image not in IMAGES:
        raise ValueError(f"unknown image {image!r}: expected one of {', '.join(IMAGES)}")
    return f"{REPOSITORY_PREFIX}/{image}:{version()}"


def reference(image: str) -> str:
    """The fully qualified name the image has in containerd (and in its archive)."""
    return f"{DEFAULT_REGISTRY}/{short_reference(image)}"


def in_registry(image: str, registry: str) -> str:
    """The image's name in a registry (`hack/images push REGISTRY`): `REGISTRY/kubetest2-training/<image>:<version>`,
    what TRAINING_IMAGE or NCCL_TESTS_IMAGE then names."""
    return f"{registry.rstrip('/')}/{short_reference(image)}"


# containerd's CRI `sandbox_image` for the real nodes.
def sandbox_image() -> str:
    return reference("pause")
