"""Build, export, import and clean the images (the cache layout is images/README.md's).

`$KT2T_CACHE/images/<name>@<input hash>/image.oci.tar` is an image's OCI archive (what
`ctr images import` reads), `build.json` beside it what was built and how long it took. A folder
that exists with both files is a built image: `build` skips it. After a build, the image's older
folders are removed and buildah's working containers and unused images too, so the machine keeps
one archive per image and one copy of each layer in buildah's store (whose layers make the next
build of a changed image fast).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localcluster.images import bases
from localcluster.images.names import REPO, in_registry, reference
from localcluster.images.specs import SPECS, input_hash, spec
from localcluster.images.tools import cache_root, check_tools, du_bytes, image_id, log, run, tidy_store

ARCHIVE = "image.oci.tar"
RECORD = "build.json"
# pip's cache inside a RUN step (the Dockerfiles' `--mount=type=cache`) lives in buildah's cache
# folder; nothing else of the build survives outside the images.


@dataclass(frozen=True)
class Built:
    """An image in the cache."""

    name: str
    reference: str
    folder: Path

    @property
    def archive(self) -> Path:
        return self.folder / ARCHIVE


def cached(name: str) -> Built:
    """Where image `name` of the current inputs is (or goes) in the cache."""
    folder = cache_root() / f"{name}@{input_hash(name, bases.recipe_hashes())}"
    return Built(name, reference(name), folder)


def is_built(image: Built) -> bool:
    return image.archive.is_file() and (image.folder / RECORD).is_file()


def order(names: list[str]) -> list[str]:
    """The images to build, each after the images it builds on."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        for other in spec(name).needs:
            visit(other)
        if name not in ordered:
            ordered.append(name)

    for name in names:
        visit(name)
    return ordered


def build(names: list[str], force: bool = False) -> list[Built]:
    """Build (or find in the cache) each image and the images it builds on; returns them in order."""
    done = []
    for name in order(names or list(SPECS)):
        absent = missing_external_bases(name)
        if absent:
            message = (f"{name}: not built: its base {', '.join(absent)} is not in buildah's store, and no registry "
                       "can be reached here nor can it be made locally (images/README.md)")
            if names:
                raise SystemExit(f"hack/images: {message}")
            log(message)
            continue
        image = cached(name)
        if is_built(image) and not force:
            log(f"{name}: cached, {image.archive}")
        else:
            check_tools()
            build_one(image)
        done.append(image)
    return done


def missing_external_bases(name: str) -> list[str]:
    """The bases image `name` needs that buildah's store lacks (none for most images)."""
    dockerfile = REPO / spec(name).dockerfile
    wanted = [dockerfile_default(dockerfile, argument) for argument in spec(name).external_bases]
    return [base for base in wanted if image_id(base) is None and image_id(f"docker.io/{base}") is None]


def build_one(image: Built) -> None:
    image_spec = spec(image.name)
    bases.ensure(image_spec.bases)
    started = time.monotonic()
    for other in image_spec.needs:
        in_store(cached(other))
    # Docker's image format: OCI's has no SHELL, and buildah would run every RUN with /bin/sh.
    with build_args(image.name) as args:
        run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers", "--force-rm",
            "--format", "docker", *build_volumes(), "-f", str(REPO / image_spec.dockerfile), "-t", image.reference,
            *(f"--build-arg={key}={value}" for key, value in args.items()), str(REPO))
    build_s = time.monotonic() - started
    export(image)
    record = {"reference": image.reference, "image_id": image_id(image.reference), "build_s": round(build_s, 1),
              "export_s": round(time.monotonic() - started - build_s, 1), "archive_bytes": image.archive.stat().st_size,
              "unpacked_bytes": unpacked_bytes(image.reference)}
    (image.folder / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    for old in cache_root().glob(f"{image.name}@*"):
        if old != image.folder:
            log(f"{image.name}: removing the previous build {old}")
            shutil.rmtree(old)
    tidy_store()
    log(f"{image.name}: built in {record['build_s']} s, exported in {record['export_s']} s, "
        f"{record['archive_bytes'] / 2**20:.0f} MiB archive, {record['unpacked_bytes'] / 2**20:.0f} MiB unpacked")


def export(image: Built) -> None:
    """The image as an OCI archive, named with its full reference (which `ctr images import` uses)."""
    image.folder.mkdir(parents=True, exist_ok=True)
    partial = image.folder / (ARCHIVE + ".partial")
    partial.unlink(missing_ok=True)
    run("buildah", "push", "--quiet", image.reference, f"oci-archive:{partial}:{image.reference}")
    partial.rename(image.archive)


def in_store(image: Built) -> None:
    """Make sure buildah's store has this (already built) image, e.g. after `clean --store`."""
    if image_id(image.reference) is None:
        if not is_built(image):
            raise SystemExit(f"hack/images: {image.name} is needed but not built; run `hack/images build {image.name}`")
        run("buildah", "pull", "--quiet", f"oci-archive:{image.archive}")


def unpacked_bytes(ref: str) -> int:
    """The image's size unpacked: the sum of its layers' diff sizes in buildah's store."""
    root = Path(run("buildah", "info", "--format", "{{.store.GraphRoot}}", capture=True).strip())
    wanted = image_id(ref)
    images = json.loads((root / "overlay-images" / "images.json").read_text())
    layers = {layer["id"]: layer for layer in json.loads((root / "overlay-layers" / "layers.json").read_text())}
    top = next((image.get("layer") for image in images if image["id"] == wanted), None)
    total = 0
    while top:
        total += layers[top].get("diff-size", 0)
        top = layers[top].get("parent")
    return total


def local_cas() -> list[Path]:
    """CAs this machine's administrator added to its trust (e.g. a TLS-intercepting proxy's)."""
    return sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))


def build_volumes() -> list[str]:
    """Mounts for the build's RUN steps only: pip trusts what this machine trusts.

    Only on a machine with CAs of its own (local_cas()), which neither Debian's bundle nor pip's
    certifi has: the machine's bundle, and an /etc/pip.conf (which pip reads in any venv) naming it.
    The mounts' contents are never committed; their mount points are, as two empty files
    (/etc/pip.conf, /etc/kt2t-host-ca.crt): images/README.md says so.
    """
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not local_cas() or not bundle.is_file():
        return []
    conf = cache_root() / "build" / "pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("[global]\ncert = /etc/kt2t-host-ca.crt\n")
    return ["--volume", f"{bundle}:/etc/kt2t-host-ca.crt:ro", "--volume", f"{conf}:/etc/pip.conf:ro"]


# ---- build arguments ----------------------------------------------------------------------------

def dockerfile_default(dockerfile: Path, argument: str) -> str:
    """The default value of `ARG name=value` in a Dockerfile."""
    match = re.search(rf"^ARG {argument}=(\S+)", dockerfile.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{dockerfile}: no `ARG {argument}=...` with a default")
    return match.group(1).strip('"')


@contextmanager
def build_args(name: str) -> Iterator[dict[str, str]]:
    """The build arguments hack/images gives image `name`: the exact tag of an image it builds on,
    and for nccl-tests its source archive served on 127.0.0.1 when GitHub cannot be reached."""
    if name != "nccl-tests":
        yield {}
        return
    dockerfile = REPO / spec(name).dockerfile
    archive = nccl_tests_source(dockerfile_default(dockerfile, "NCCL_TESTS_VERSION"))
    with serve(archive) as url:
        yield {"WORKLOADS_IMAGE": reference("workloads"), "NCCL_TESTS_URL": url}


def nccl_tests_source(version: str) -> Path:
    """nccl-tests' release archive, from the cache, else GitHub, else a git repository of nccl-tests
    named by $NCCL_TESTS_GIT (e.g. a mirror): `git archive` of the release's tag."""
    archive = cache_root() / "sources" / f"nccl-tests-{version}.tar.gz"
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    url = f"https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v{version}.tar.gz"
    partial = archive.with_suffix(".partial")
    try:
        with urllib.request.urlopen(url, timeout=30) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
        partial.rename(archive)
        return archive
    except OSError as error:
        log(f"nccl-tests {version}: {url} not reachable ({error})")
    git = os.environ.get("NCCL_TESTS_GIT")
    if not git:
        raise SystemExit(f"hack/images: cannot get nccl-tests {version}: GitHub is not reachable; set NCCL_TESTS_GIT "
                         "to a git repository (or mirror) of github.com/NVIDIA/nccl-tests that has the tag "
                         f"v{version}, or put its release archive at {archive}")
    with partial.open("wb") as out:
        done = subprocess.run(["git", f"--git-dir={git}" if Path(git, "HEAD").is_file() else f"--git-dir={git}/.git",
                               "archive", "--format=tar.gz", f"--prefix=nccl-tests-{version}/", f"v{version}"],
                              stdout=out, check=False)
    if done.returncode != 0:
        partial.unlink()
        raise SystemExit(f"hack/images: `git archive v{version}` failed in NCCL_TESTS_GIT={git}")
    partial.rename(archive)
    log(f"nccl-tests {version}: archived from {git}")
    return archive


@contextmanager
def serve(file: Path) -> Iterator[str]:
    """Serve one file on 127.0.0.1 (an ephemeral port) while the build runs (buildah's ADD fetches it)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(file.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{file.name}"
    finally:
        server.shutdown()
        server.server_close()


# ---- import, list, clean ------------------------------------------------------------------------

def import_into(names: list[str], address: str, namespace: str = "k8s.io") -> None:
    """Import the built images into the containerd listening on `address` (a unix socket path)."""
    for name in order(names or list(SPECS)):
        image = cached(name)
        if not is_built(image):
            raise SystemExit(f"hack/images: {name} is not built for the current inputs; run `hack/images build`")
        run("ctr", "--address", address, "-n", namespace, "images", "import", str(image.archive))


def push(names: list[str], registry: str) -> list[str]:
    """Push the built images named (default: all) to a registry
    with buildah, from its store (refilled from the cached archive when cleaned: buildah cannot read an
    archive as a push's source); returns the pushed references. A registry on this machine's loopback
    (the local cluster's, `hack/local-cluster registry`) speaks plain HTTP: TLS is not required there;
    any other needs TLS and the credentials `buildah login` (or `aws ecr get-login-password | buildah
    login ...`) stored."""
    pushed = []
    for name in names or [name for name in SPECS if is_built(cached(name))]:
        image = cached(name)
        if not is_built(image):
            raise SystemExit(f"hack/images: {name} is not built for the current inputs; run `hack/images build {name}`")
        in_store(image)
        target = in_registry(name, registry)
        loopback = registry.split("/", 1)[0].rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "[::1]")
        started = time.monotonic()
        run("buildah", "push", "--quiet", *(["--tls-verify=false"] if loopback else []), image.reference,
            f"docker://{target}")
        log(f"{name}: pushed to {target} in {time.monotonic() - started:.1f} s")
        pushed.append(target)
    return pushed


def listing() -> list[dict[str, object]]:
    """Every image: its reference, whether the current inputs are built, the archive and its sizes."""
    rows = []
    for name in SPECS:
        image = cached(name)
        row: dict[str, object] = {"name": name, "reference": image.reference, "built": is_built(image),
                                  "archive": str(image.archive)}
        if is_built(image):
            row.update(json.loads((image.folder / RECORD).read_text()))
        rows.append(row)
    return rows


def disk() -> dict[str, int]:
    """Bytes on disk: the archives, the stand-in markers and sources, buildah's store and cache mounts."""
    return {"archives": du_bytes(cache_root()), "buildah_store": du_bytes(Path("/var/lib/containers/storage")),
            "buildah_cache_mounts": sum(du_bytes(p) for p in Path("/var/tmp").glob("buildah-cache*"))}


def clean(archives: bool, store: bool, caches: bool) -> None:
    """Remove what the builds left: the archives, buildah's images of ours and stand-ins, its caches."""
    if store:
        refs = [reference(name) for name in SPECS] + [bases.qualified(base) for base in bases.STANDINS]
        present = [ref for ref in refs if image_id(ref) is not None]
        if present:
            run("buildah", "rmi", "--force", *present)
        run("buildah", "rmi", "--prune", check=False)
        shutil.rmtree(cache_root() / "bases", ignore_errors=True)
    if caches:
        for folder in Path("/var/tmp").glob("buildah-cache*"):
            shutil.rmtree(folder)
        shutil.rmtree(cache_root() / "sources", ignore_errors=True)
    if archives:
        for folder in cache_root().glob("*@*"):
            shutil.rmtree(folder)
