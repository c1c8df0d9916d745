"""What each image is built from, and the hash of those inputs that names its cache folder.

An image's inputs are its Dockerfile, the files its COPY steps read (listed here, next to the
Dockerfile they serve), the stand-in bases it starts from (by recipe), the images it builds on (by
their own hash) and its tag. A change to any of them, and to nothing else, gives a new hash and so a
rebuild: editing harness/ rebuilds the kubetest2 image only, editing workloads/ the workloads image
and what builds on it. An input an image uses only in part is hashed in that part alone (PARTS):
pyproject.toml's linter and pytest settings, and the project's README (the kubetest2 image copies
images/kubetest2/README.md in its place), rebuild nothing.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from localcluster.images.names import REPO, version

# Never part of an image: caches Python writes beside the sources. The repository's .dockerignore
# lists the same patterns, so `docker build` and the hash see the same files (a test checks).
IGNORED = ("__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".mypy_cache")
# Files inside an image's input folders that no COPY takes (also in .dockerignore): the workloads
# image's Dockerfile is its recipe, not part of the workloads package (nor of the kubetest2 image).
EXCLUDED = ("workloads/Dockerfile",)


def packaging_tables(path: Path) -> bytes:
    """pyproject.toml as `pip install .` reads it: every table but [tool.*], and [tool.setuptools.*],
    without comment lines. The rest ([tool.ruff], [tool.pytest.ini_options]) stays in the build stage
    pip runs in and never reaches an image, so an edit there (a marker, a lint rule) must not rebuild
    one. Line by line (a table starts at a `[` in column 0), not tomllib: Python 3.10 has none."""
    kept: list[str] = []
    keep = True
    for line in path.read_text(encoding="utf-8").splitlines():
        header = re.match(r"\[\[?\s*([^\]\s]+)", line)
        if header:
            table = header.group(1)
            keep = not table.startswith("tool.") or table.startswith("tool.setuptools")
        if keep and line.strip() and not line.lstrip().startswith("#"):
            kept.append(line.rstrip())
    return "\n".join(kept).encode()


# Inputs an image's build reads in part, and the part: that is hashed instead of the whole file.
PARTS: dict[str, Callable[[Path], bytes]] = {"pyproject.toml": packaging_tables}


@dataclass(frozen=True)
class ImageSpec:
    """One image: how it is built and from what."""

    name: str
    # Its Dockerfile, relative to the repository (the build context is the repository root).
    dockerfile: str
    # Files and folders the image is made of, relative to the repository, beside the Dockerfile.
    inputs: tuple[str, ...]
    # Stand-in bases (bases.py) the build needs in buildah's store.
    bases: tuple[str, ...] = ()
    # Images of ours it builds FROM: built first, and their hash is part of this one's.
    needs: tuple[str, ...] = ()
    # Build arguments naming a base that hack/images cannot make: the image is built only when
    # buildah's store already has it (the Dockerfile's default names it, so its hash covers it).
    external_bases: tuple[str, ...] = ()


SPECS: dict[str, ImageSpec] = {spec.name: spec for spec in (
    ImageSpec("pause", "images/pause/Dockerfile", ("images/pause/pause.c",), bases=("debian:bookworm-slim",)),
    ImageSpec("workloads", "workloads/Dockerfile", ("workloads",), bases=("debian:bookworm-slim",)),
    ImageSpec("nccl-tests", "images/nccl-tests/Dockerfile", (), needs=("workloads",),
              external_bases=("CUDA_DEVEL_IMAGE",)),
    # What Dockerfile.kubetest2's COPY steps read (images/kubetest2/README.md stands in for the
    # project's README as the package's description: a docs edit rebuilds no image).
    ImageSpec("kubetest2", "Dockerfile.kubetest2",
              ("hack/go/kubetest2", "pyproject.toml", "images/kubetest2/README.md", "harness", "testbins", "manifests",
               "workloads"),
              bases=("debian:bookworm-slim", "golang:1.25-bookworm")),
)}


def spec(name: str) -> ImageSpec:
    if name not in SPECS:
        raise ValueError(f"unknown image {name!r}: expected one of {', '.join(SPECS)}")
    return SPECS[name]


def ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in IGNORED)


def input_files(paths: tuple[str, ...], repo: Path = REPO) -> Iterator[Path]:
    """Every file under the given paths (sorted, IGNORED left out); a missing path is an error."""
    for rel in sorted(paths):
        top = repo / rel
        if top.is_file():
            yield top
        elif top.is_dir():
            for folder, subfolders, files in os.walk(top):
                subfolders[:] = sorted(d for d in subfolders if not ignored(d))
                for name in sorted(files):
                    path = Path(folder) / name
                    if not ignored(name) and path.relative_to(repo).as_posix() not in EXCLUDED:
                        yield path
        else:
            raise FileNotFoundError(f"image input {rel!r} not found under {repo}")


def input_hash(name: str, base_recipes: dict[str, str], repo: Path = REPO) -> str:
    """A short hash of everything image `name` is built from (see the module's docstring).

    `base_recipes`: stand-in base -> its recipe hash (bases.recipe_hashes()), so a changed stand-in
    rebuilds the images on it.
    """
    image = spec(name)
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("tag", f"{name}:{version(repo / 'pyproject.toml')}".encode())
    files = [repo / image.dockerfile, *input_files(image.inputs, repo)]
    for path in files:
        # The executable bit travels into the image (COPY keeps modes); other mode bits do not matter.
        executable = "x" if os.access(path, os.X_OK) else "-"
        rel = path.relative_to(repo).as_posix()
        add(f"file {rel} {executable}", PARTS[rel](path) if rel in PARTS else path.read_bytes())
    for base in image.bases:
        add(f"base {base}", base_recipes[base].encode())
    for other in image.needs:
        add(f"image {other}", input_hash(other, base_recipes, repo).encode())
    return digest.hexdigest()[:16]
