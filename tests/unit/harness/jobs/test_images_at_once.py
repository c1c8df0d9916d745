"""A test whose image cannot be pulled fails at once naming the setting (harness/jobs/images.py):
an image flag given empty (upstream's rule), and under upstream's binary names a setting left at
this project's unpublished default image."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from harness.config.settings import NCCL_TESTS_IMAGE, WORKLOADS_IMAGE, resolve
from harness.errors import TestFailure
from harness.framework.cli import parse_args
from harness.jobs.images import image


def ctx(*argv: str, invoked_as: str = "", env: dict[str, str] | None = None) -> Any:
    cfg = resolve(parse_args(list(argv)), env or {})
    return SimpleNamespace(cfg=cfg, name="TestX", session=SimpleNamespace(invoked_as=invoked_as, binary="e2e-nvidia"))


@pytest.mark.parametrize(("flag", "setting"), [("--nvidiaTestImage=", "nccl_tests_image"),
                                               ("--bertTrainingImage=", "bert_training_image")])
def test_an_empty_image_flag_fails_the_test_naming_it(flag: str, setting: str):
    for invoked_as in ("", "nvidia.test"):
        with pytest.raises(TestFailure, match=f"^{flag.rstrip('=')} .*is empty: TestX needs an image"):
            image(ctx(flag, invoked_as=invoked_as), setting)


def test_upstream_names_refuse_the_projects_default_images_naming_the_setting():
    with pytest.raises(TestFailure, match=r"TestX needs --nvidiaTestImage \(or NCCL_TESTS_IMAGE\): unset, its "
                                          f"default {NCCL_TESTS_IMAGE} is this project's image"):
        image(ctx(invoked_as="nvidia.test"), "nccl_tests_image")
    with pytest.raises(TestFailure, match=f"TestX needs TRAINING_IMAGE: unset, its default {WORKLOADS_IMAGE}"):
        image(ctx(invoked_as="nvidia-training.test"), "training_image")


def test_set_images_and_our_names_pass():
    assert image(ctx("--nvidiaTestImage=repo/nccl:1", invoked_as="nvidia.test"), "nccl_tests_image") == "repo/nccl:1"
    assert image(ctx(invoked_as="nvidia.test", env={"TRAINING_IMAGE": "repo/w:1"}), "training_image") == "repo/w:1"
    # upstream's default pytorch image is published: no refusal
    assert image(ctx(invoked_as="nvidia.test"), "pytorch_image").startswith("763104351884.dkr.ecr")
    # our names: the local cluster has the project's images imported
    assert image(ctx(), "nccl_tests_image") == NCCL_TESTS_IMAGE
    assert image(ctx(), "training_image") == WORKLOADS_IMAGE
