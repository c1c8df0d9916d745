"""Running buildah and friends: one place that logs each command, fails naming it, and knows the cache."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localcluster.base import system_packages

# The commands `hack/images build` needs, and the Debian package of each (localcluster/base/system_packages.txt's
# `images` rows, which hack/system-packages.sh installs), and Go (a prerequisite, README.md).
REQUIRED = {**system_packages.rows("images"), "go": "(Go, see README.md)"}


def log(message: str) -> None:
    print(f"[images {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """$KT2T_CACHE/images (KT2T_CACHE as hack/versions.sh defines it)."""
    cache = os.environ.get("KT2T_CACHE") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                                / "kubetest2-training")
    return Path(cache) / "images"


def check_tools(tools: tuple[str, ...] = tuple(REQUIRED)) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"hack/images: missing commands {', '.join(missing)}; install "
                         f"{', '.join(REQUIRED[t] for t in missing)} (hack/system-packages.sh does, as root)")
    if os.geteuid() != 0:
        raise SystemExit("hack/images: run as root (buildah's chroot isolation and mmdebstrap's root mode need it)")


def run(*argv: str, capture: bool = False, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run a command, its output to stderr (or captured and returned); fail naming it."""
    log("$ " + " ".join(argv))
    done = subprocess.run(argv, stdout=subprocess.PIPE if capture else sys.stderr, text=True, env=env, check=False)
    if check and done.returncode != 0:
        raise SystemExit(f"hack/images: `{' '.join(argv[:3])} ...` failed with exit {done.returncode}")
    return done.stdout or "" if capture else ""


def image_id(reference: str) -> str | None:
    """The image's id in buildah's store, None when it has no image of that name."""
    done = subprocess.run(["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def tidy_store() -> None:
    """Remove the images no name or build cache still uses (a rebuilt image's old layers).

    Under the lock (locked()): a concurrent build's intermediate images look unused too.
    """
    run("buildah", "rmi", "--prune", check=False)


@contextmanager
def locked() -> Iterator[None]:
    """One hack/images at a time on this machine (builds, imports and cleans share buildah's store)."""
    lock = cache_root() / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another hack/images ({lock})")
            fcntl.flock(file, fcntl.LOCK_EX)
        yield


def du_bytes(path: Path) -> int:
    """Bytes on disk under path (du), 0 when missing."""
    if not path.exists():
        return 0
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=False)
    return int(out.stdout.split()[0]) if out.stdout else 0
