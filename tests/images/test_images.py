"""hack/images: the input hash rebuilds exactly the images whose inputs changed (unit, on a copy of
the repository's image inputs), and the built images run their programs (marked `images`: they
build the images, or take them from the cache, then run commands in them with `buildah run`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from localcluster.images import build, names, specs  # noqa: E402
from localcluster.images.specs import SPECS, input_hash  # noqa: E402

RECIPES = {"debian:bookworm-slim": "d1", "golang:1.25-bookworm": "g1"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of every file any image is built from (plus a file no image reads)."""
    paths = {path for image in SPECS.values() for path in image.inputs}
    paths |= {image.dockerfile for image in SPECS.values() if image.dockerfile}
    for rel in sorted(paths):
        source, target = REPO / rel, tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*specs.IGNORED))
        else:
            shutil.copy2(source, target)
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "notes.md").write_text("read by no image\n")
    shutil.copy2(REPO / "README.md", tmp_path / "README.md")
    return tmp_path


def hashes(repo: Path, recipes: dict[str, str] = RECIPES) -> dict[str, str]:
    return {name: input_hash(name, recipes, repo) for name in SPECS}


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


def test_hash_is_stable_and_differs_per_image(repo: Path):
    first = hashes(repo)
    assert first == hashes(repo)
    assert len(set(first.values())) == len(first)


@pytest.mark.parametrize(("edit", "rebuilt"), [
    ("workloads/Dockerfile", {"workloads", "nccl-tests"}),
    ("workloads/nanogpt.py", {"workloads", "nccl-tests", "kubetest2"}),
    ("images/nccl-tests/Dockerfile", {"nccl-tests"}),
    ("Dockerfile.kubetest2", {"kubetest2"}),
    ("harness/config.py", {"kubetest2"}),
    ("testbins/e2e_nvidia.py", {"kubetest2"}),
    ("manifests/mpijob.yaml", {"kubetest2"}),
    ("hack/go/kubetest2/go.mod", {"kubetest2"}),
    ("images/pause/pause.c", {"pause"}),
    ("images/pause/Dockerfile", {"pause"}),
    ("bench/notes.md", set()),
    # The project's README is documentation; the kubetest2 image's package description is its own file.
    ("README.md", set()),
    ("images/kubetest2/README.md", {"kubetest2"}),
])
def test_an_edit_rebuilds_exactly_the_images_made_of_it(repo: Path, edit: str, rebuilt: set[str]):
    before = hashes(repo)
    with (repo / edit).open("a") as file:
        file.write("\n# an edit\n")
    assert changed(before, hashes(repo)) == rebuilt


@pytest.mark.parametrize(("old", "new", "rebuilt"), [
    # Settings pip never reads (the linter's, pytest's) and comments rebuild nothing.
    ("line-length = 120", "line-length = 121", set()),
    ('testpaths = ["tests"]', 'testpaths = ["tests", "bench"]', set()),
    ("[build-system]", "# a comment\n[build-system]", set()),
    # What the installed package is made of rebuilds the image that installs it.
    ('"PyYAML>=6",', '"PyYAML>=6.0.1",', {"kubetest2"}),
    ('"harness.verdict" = ["thresholds.yaml"]', '"harness.verdict" = ["thresholds.yaml", "*.json"]', {"kubetest2"}),
])
def test_pyproject_counts_only_in_what_pip_reads(repo: Path, old: str, new: str, rebuilt: set[str]):
    before = hashes(repo)
    pyproject = repo / "pyproject.toml"
    assert old in pyproject.read_text()
    pyproject.write_text(pyproject.read_text().replace(old, new, 1))
    assert changed(before, hashes(repo)) == rebuilt


def test_a_new_workloads_file_and_an_executable_bit_count(repo: Path):
    before = hashes(repo)
    (repo / "workloads" / "extra.py").write_text("x = 1\n")
    after_new = hashes(repo)
    assert changed(before, after_new) == {"workloads", "nccl-tests", "kubetest2"}
    (repo / "workloads" / "extra.py").chmod(0o755)
    assert changed(after_new, hashes(repo)) == {"workloads", "nccl-tests", "kubetest2"}


def test_python_caches_do_not_count(repo: Path):
    before = hashes(repo)
    (repo / "workloads" / "__pycache__").mkdir(exist_ok=True)
    (repo / "workloads" / "__pycache__" / "nanogpt.cpython-311.pyc").write_bytes(b"\0cache")
    (repo / "harness" / "stray.pyc").write_bytes(b"\0cache")
    assert hashes(repo) == before


def test_a_changed_stand_in_base_rebuilds_the_images_on_it(repo: Path):
    before = hashes(repo)
    after = hashes(repo, {**RECIPES, "golang:1.25-bookworm": "g2"})
    assert changed(before, after) == {"kubetest2"}
    after = hashes(repo, {**RECIPES, "debian:bookworm-slim": "d2"})
    assert changed(before, after) == set(SPECS)


def test_the_version_is_the_tag_and_part_of_the_hash(repo: Path):
    before = hashes(repo)
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(re.sub(r'^version = ".*"', 'version = "9.9.9"', pyproject.read_text(), flags=re.MULTILINE))
    assert changed(before, hashes(repo)) == set(SPECS)


def test_a_missing_input_is_named(repo: Path):
    shutil.rmtree(repo / "manifests")
    with pytest.raises(FileNotFoundError, match="manifests"):
        input_hash("kubetest2", RECIPES, repo)


def test_dockerignore_leaves_out_what_the_hash_leaves_out():
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    for pattern in specs.IGNORED:
        assert f"**/{pattern}" in lines, f".dockerignore lacks **/{pattern} (localcluster/images/specs.py IGNORED)"
    for path in specs.EXCLUDED:
        assert path in lines, f".dockerignore lacks {path} (localcluster/images/specs.py EXCLUDED)"


def test_names_are_qualified_versioned_and_never_latest():
    version = names.version()
    for image in SPECS:
        ref = names.reference(image)
        assert ref == f"docker.io/kubetest2-training/{image}:{version}"
        assert not ref.endswith(":latest")
    assert names.sandbox_image() == names.reference("pause")
    with pytest.raises(ValueError, match="unknown image 'nope'"):
        names.reference("nope")


def test_the_nccl_tests_image_builds_on_the_workloads_tag_hack_images_gives():
    dockerfile = REPO / "images/nccl-tests/Dockerfile"
    assert build.dockerfile_default(dockerfile, "WORKLOADS_IMAGE") == names.short_reference("workloads")


# ---- the built images, for real -----------------------------------------------------------------

def in_image(image: str, *command: str) -> subprocess.CompletedProcess[str]:
    """Run a command in a working container of the built image (buildah run; chroot isolation
    allows only the host network: the commands reach for none)."""
    built = build.build([image])[-1]
    build.in_store(built)
    container = subprocess.run(["buildah", "from", "--pull-never", built.reference], capture_output=True, text=True,
                               check=True).stdout.strip()
    try:
        return subprocess.run(["buildah", "run", "--isolation", "chroot", "--network", "host", container, "--",
                               *command], capture_output=True, text=True, timeout=600, check=False)
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


@pytest.fixture(scope="module")
def buildah() -> Iterator[None]:
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed: run hack/system-packages.sh (as root)")
    yield


@pytest.mark.images
def test_workloads_image_imports_the_workloads_and_torch_has_volta(buildah: None):
    dockerfile_torch = build.dockerfile_default(REPO / "workloads/Dockerfile", "TORCH_VERSION")
    done = in_image("workloads", "python", "-c",
                    "import workloads.nanogpt, workloads.bert, torch; "
                    "print(torch.__version__, torch.version.cuda, torch._C._cuda_getArchFlags())")
    assert done.returncode == 0, done.stderr
    torch_version, cuda, arch_flags = done.stdout.split(maxsplit=2)
    assert torch_version.split("+")[0] == dockerfile_torch
    assert cuda.startswith("12."), f"the default torch should carry CUDA 12 (V100), has {cuda}"
    assert "sm_70" in arch_flags.split(), f"no sm_70 (V100) kernels in the default torch: {arch_flags}"


@pytest.mark.images
def test_workloads_image_sshd_accepts_its_config_without_strict_modes(buildah: None):
    done = in_image("workloads", "bash", "-c", "/usr/sbin/sshd -t && /usr/sbin/sshd -T -f /etc/ssh/sshd_config")
    assert done.returncode == 0, done.stderr
    assert "strictmodes no" in done.stdout.splitlines()
    done = in_image("workloads", "ssh", "-G", "worker-0")
    assert "stricthostkeychecking false" in done.stdout.splitlines()
    assert "userknownhostsfile /dev/null" in done.stdout.splitlines()


@pytest.mark.images
def test_nccl_tests_image_has_all_reduce_perf_linked_to_the_images_nccl_and_mpi(buildah: None):
    absent = build.missing_external_bases("nccl-tests")
    if absent:
        pytest.skip(f"the nccl-tests image needs {', '.join(absent)} in buildah's store (images/README.md)")
    done = in_image("nccl-tests", "bash", "-c", "ldd /opt/nccl-tests/build/all_reduce_perf")
    assert done.returncode == 0, done.stderr
    assert "not found" not in done.stdout, done.stdout
    libraries = dict(re.findall(r"^\s*(\S+) => (\S+)", done.stdout, re.MULTILINE))
    assert "/site-packages/nvidia/" in libraries["libnccl.so.2"], libraries
    assert libraries["libmpi.so.40"].startswith("/usr/lib/x86_64-linux-gnu/"), libraries
    for binary in ("all_gather_perf", "alltoall_perf"):
        assert in_image("nccl-tests", "test", "-x", f"/opt/nccl-tests/build/{binary}").returncode == 0


@pytest.mark.images
def test_kubetest2_image_runs_the_test_binaries(buildah: None):
    done = in_image("kubetest2", "bash", "-c", "e2e-nvidia-training --help && kubetest2 --help && "
                                               "kubetest2-tester-exec --help")
    assert done.returncode == 0, done.stderr
    assert "e2e-nvidia-training" in done.stdout + done.stderr


@pytest.mark.images
def test_pause_image_is_one_static_program(buildah: None):
    done = in_image("pause", "/pause", "-v")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pause (kubetest2-training)"
