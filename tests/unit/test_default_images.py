"""The default images are the ones this project builds (`hack/images build`), tagged with the
project's version, never `latest`, and every template pulls only what is not present."""

from __future__ import annotations

import re
from pathlib import Path

from harness import __version__
from harness.cluster.manifests import template_text
from harness.config.settings import NCCL_TESTS_IMAGE, WORKLOADS_IMAGE, resolve
from harness.framework.cli import parse_args

REPO = Path(__file__).resolve().parents[2]
WORK_TEMPLATES = ("torchrun-job.yaml", "mpijob.yaml", "per-node-job.yaml", "daemonset.yaml")


def project_version() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_the_defaults_are_the_built_images_with_the_project_version():
    cfg = resolve(parse_args([]), {})
    version = project_version()
    assert __version__ == version
    assert (cfg.training_image, cfg.nccl_tests_image) == (WORKLOADS_IMAGE, NCCL_TESTS_IMAGE) == (
        f"kubetest2-training/workloads:{version}", f"kubetest2-training/nccl-tests:{version}")
    for image in (cfg.training_image, cfg.nccl_tests_image):
        assert not image.endswith(":latest") and ":" in image


def test_every_template_pulls_only_what_is_not_present():
    for name in WORK_TEMPLATES:
        text = template_text(name)
        images = text.count("image: {{.Image}}")
        assert images and text.count("imagePullPolicy: IfNotPresent") == images, name
        assert "imagePullPolicy: Always" not in text, name


def test_the_settings_page_says_the_one_command_that_builds_them():
    page = (REPO / "docs" / "SETTINGS.md").read_text()
    assert "`hack/images build workloads nccl-tests`" in page
