"""Local stand-ins for the base images no registry can serve here, built reproducibly into buildah's
store under the real base's name, so the Dockerfiles build as shipped.

- debian:bookworm-slim: mmdebstrap's minbase of Debian 12 (the default Debian mirrors, with updates
  and security, as the official image's sources), docs, man pages and locales excluded as the
  official slim image excludes them, SOURCE_DATE_EPOCH fixed.
- golang:1.25-bookworm: that stand-in plus ca-certificates and git from Debian, the machine's own
  added CAs (/usr/local/share/ca-certificates) and its Go toolchain (`go env GOROOT`) in
  /usr/local/go, with the official image's GOPATH, PATH and GOTOOLCHAIN=local.
images/README.md says how each differs from the real base.

Each stand-in is rebuilt only when its recipe changes (its hash, recorded in the cache); the recipe
of the Go stand-in includes the machine's `go version`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from localcluster.images.tools import cache_root, image_id, log, run

# Debian 12's release day: the stand-in's file times, for output that depends only on the packages.
SOURCE_DATE_EPOCH = "1686355200"
DEBIAN = "debian:bookworm-slim"
GOLANG = "golang:1.25-bookworm"
STANDINS = (DEBIAN, GOLANG)

# What the official slim image leaves out (debuerreotype's slimify list).
SLIM_EXCLUDES = (
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/groff/*", "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/lintian/overrides/*", "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias", "path-exclude=/usr/share/man/*",
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def qualified(base: str) -> str:
    """What Dockerfile's `FROM debian:bookworm-slim` resolves to."""
    return f"docker.io/library/{base}"


def go_version() -> str:
    return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def recipe_hashes() -> dict[str, str]:
    """Stand-in -> hash of its recipe: what it is built from and how (bump `v` on a change here)."""
    debian = "v1 mmdebstrap minbase bookworm " + " ".join(SLIM_EXCLUDES) + SOURCE_DATE_EPOCH
    local_cas = b"".join(p.read_bytes() for p in sorted(Path("/usr/local/share/ca-certificates").glob("*.crt")))
    golang = f"v1 {debian} + ca-certificates git + {go_version()} + CAs {hashlib.sha256(local_cas).hexdigest()}"
    return {name: hashlib.sha256(recipe.encode()).hexdigest()[:16]
            for name, recipe in ((DEBIAN, debian), (GOLANG, golang))}


def marker(base: str, recipe: str) -> Path:
    return cache_root() / "bases" / f"{base.replace(':', '_')}@{recipe}"


def present(base: str, recipe: str) -> bool:
    """True when buildah has the stand-in this recipe built (the marker records its image id)."""
    record = marker(base, recipe)
    return record.is_file() and image_id(qualified(base)) == record.read_text().strip()


def ensure(bases: tuple[str, ...]) -> None:
    """Build the stand-ins that are missing or whose recipe changed (Debian first: Go's is on it)."""
    recipes = recipe_hashes()
    for base in STANDINS:
        if base not in bases and not (base == DEBIAN and GOLANG in bases):
            continue
        if present(base, recipes[base]):
            continue
        log(f"building the stand-in for {base}")
        (build_debian if base == DEBIAN else build_golang)()
        record = marker(base, recipes[base])
        record.parent.mkdir(parents=True, exist_ok=True)
        for old in record.parent.glob(f"{base.replace(':', '_')}@*"):
            old.unlink()
        record.write_text(image_id(qualified(base)) or "")


def build_debian() -> None:
    with tempfile.TemporaryDirectory(prefix="kt2t-debian-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        # No mirror given: mmdebstrap uses Debian's default one, with bookworm-updates and
        # bookworm-security, as the official image's sources list. The host's resolv.conf and
        # hostname, which mmdebstrap copies in, are left out (the runtime provides both).
        run("mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
            *(f"--dpkgopt={option}" for option in SLIM_EXCLUDES),
            "--aptopt=Acquire::Languages \"none\"",
            "--customize-hook=rm -f \"$1/etc/resolv.conf\" && : > \"$1/etc/hostname\"",
            "bookworm", str(rootfs), env=env)
        container = run("buildah", "from", "scratch", capture=True).strip()
        run("buildah", "add", container, str(rootfs), "/")
        run("buildah", "config", "--env", f"PATH={DEFAULT_PATH}", "--cmd", "bash", container)
        commit(container, DEBIAN)


def build_golang() -> None:
    goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    container = run("buildah", "from", qualified(DEBIAN), capture=True).strip()
    run("buildah", "run", "--isolation", "chroot", "--network", "host", container, "--", "sh", "-c",
        "apt-get update -q && apt-get install -y -q --no-install-recommends ca-certificates git "
        "&& rm -rf /var/lib/apt/lists/* && mkdir -p /go/bin /go/src")
    # The machine's own added CAs (e.g. a TLS proxy's), so `go` reaches the module proxy as the
    # machine's go does.
    added = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    if added:
        run("buildah", "copy", container, *map(str, added), "/usr/local/share/ca-certificates/")
        run("buildah", "run", "--isolation", "chroot", container, "--", "update-ca-certificates")
    run("buildah", "copy", container, goroot, "/usr/local/go")
    run("buildah", "config", "--env", "GOPATH=/go", "--env", f"PATH=/go/bin:/usr/local/go/bin:{DEFAULT_PATH}",
        "--env", "GOTOOLCHAIN=local", "--env", f"GOLANG_VERSION={go_version().removeprefix('go')}",
        "--workingdir", "/go", container)
    commit(container, GOLANG)


def commit(container: str, base: str) -> None:
    run("buildah", "commit", "--rm", "--timestamp", SOURCE_DATE_EPOCH, container, qualified(base))
