"""The default images are the ones this project builds (`hack/images build`), tagged with the
project's version, never `latest`, and every template pulls only what is not present."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from harness import __version__
from harness.cluster.manifests import template_text
from harness.config.settings import NCCL_TESTS_IMAGE, WORKLOADS_IMAGE, resolve
from harness.errors import ConfigError
from harness.framework.cli import parse_args
from harness.jobs.launchers.base import pull_policy
from harness.jobs.workload import Workload

from ...harness.cluster.test_rendering import objects, placement


def pod_specs(obj: dict) -> list[dict]:
    """The pod specs of a Job, an MPIJob (launcher and worker) or a DaemonSet."""
    if obj["kind"] == "ElasticJob":
        return [spec["template"]["spec"] for spec in obj["spec"]["replicaSpecs"].values()]
    if obj["kind"] == "MPIJob":
        return [spec["template"]["spec"] for spec in obj["spec"]["mpiReplicaSpecs"].values()]
    if obj["kind"] in ("Job", "DaemonSet"):
        return [obj["spec"]["template"]["spec"]]
    return []

REPO = Path(__file__).resolve().parents[4]
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


def test_every_template_pulls_as_image_pull_policy_says():
    for name in (*WORK_TEMPLATES, "shared-gpu-job.yaml", "trainjob-elastic-runtime.yaml"):
        text = template_text(name)
        images = text.count("image: {{.Image}}")
        assert images and text.count("imagePullPolicy: {{.ImagePullPolicy}}") == images, name


@pytest.mark.parametrize(("setting", "image", "policy"), [
    ("upstream", "repo/nccl:latest", "Always"), ("upstream", "repo/nccl:1", "Always"),
    ("upstream", "repo/nccl@sha256:" + "0" * 64, "IfNotPresent"), ("IfNotPresent", "repo/nccl:latest", "IfNotPresent"),
    ("Never", "repo/nccl:1", "Never")])
def test_image_pull_policy_is_upstreams_always_for_tags_unless_set(setting: str, image: str, policy: str):
    assert pull_policy(setting, image) == policy


def test_the_default_is_upstreams_and_the_rendered_pods_follow_the_setting():
    assert resolve(parse_args([]), {}).image_pull_policy == "upstream"
    assert resolve(parse_args([]), {"IMAGE_PULL_POLICY": "IfNotPresent"}).image_pull_policy == "IfNotPresent"
    with pytest.raises(ConfigError, match="IMAGE_PULL_POLICY"):
        resolve(parse_args([]), {"IMAGE_PULL_POLICY": "always"})
    workload = Workload("bert-training", "workloads.bert")
    for setting, policy in (("upstream", "Always"), ("IfNotPresent", "IfNotPresent")):
        where = replace(placement(), image_pull_policy=setting)
        for launcher in ("torchrun", "mpi", "per-node"):
            for obj in objects(launcher, workload, where):
                for pod in pod_specs(obj):
                    assert {c["imagePullPolicy"] for c in pod["containers"]} == {policy}, (launcher, setting)


def test_the_local_cluster_runs_keep_if_not_present():
    """Its nodes have the images imported, from no registry: Always would fail every pull."""
    assert "IMAGE_PULL_POLICY=${IMAGE_PULL_POLICY:-IfNotPresent}" in (REPO / "hack" / "main-job").read_text()
    runs = (REPO / "tests" / "integration" / "kubetest2_runs.py").read_text()
    assert '"IMAGE_PULL_POLICY": "IfNotPresent"' in runs


def test_the_settings_page_says_the_one_command_that_builds_them():
    page = (REPO / "docs" / "SETTINGS.md").read_text()
    assert "`hack/images build workloads nccl-tests`" in page
