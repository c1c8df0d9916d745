"""The images every real node has from the start, and loading image archives into the nodes.

- the sandbox image (images/pause/pause.c, the pause image's own program, built static with gcc
  here as images/pause/Dockerfile builds it, without buildah): kubelet's pod sandbox;
- a test image of Debian's static busybox (package busybox-static): a shell, nc, wget, nslookup,
  for the real nodes' own tests (network, DNS, Services, faults) without the multi-GB workloads image.
Both are written as OCI archives (one uncompressed layer) into the binary cache, keyed by a hash of
their inputs, and imported with `ctr images import` into each node's containerd, which unpacks them
into its snapshotter. Images built elsewhere (hack/images) load the same way (`load-image`).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from localcluster.base.layout import NodeLayout
from localcluster.realnodes.configs import DEFAULT_SANDBOX_IMAGE

# The one pause program: the pause image's (images/pause/); the same gcc flags as its Dockerfile.
PAUSE_SOURCE = Path(__file__).resolve().parents[2] / "images" / "pause" / "pause.c"
PAUSE_CFLAGS = ("-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror")
BUSYBOX = Path("/bin/busybox")
TEST_IMAGE = "kubetest2-training.local/busybox:local"
BUSYBOX_APPLETS = ("sh", "sleep", "cat", "echo", "nc", "wget", "nslookup", "hostname", "ls", "env", "true",
                   "false", "kill", "ps", "ip", "ping", "grep", "wc", "head", "tail", "timeout", "id", "mkdir",
                   "httpd", "uname", "sed", "date", "seq")
CONTAINERD_NAMESPACE = "k8s.io"


class ImageError(Exception):
    """Building or importing an image failed; the message names the image and the cause."""


@dataclass(frozen=True)
class LayerFile:
    path: str  # inside the image, no leading slash
    data: bytes = b""
    mode: int = 0o755
    link: str = ""  # a symlink's target instead of data


def layer_tar(files: list[LayerFile]) -> bytes:
    """A reproducible tar layer (fixed times and owners)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({str(Path(f.path).parent) for f in files} - {"."})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for item in files:
            info = tarfile.TarInfo(item.path)
            info.mode = item.mode
            if item.link:
                info.type, info.linkname = tarfile.SYMTYPE, item.link
                tar.addfile(info)
            else:
                info.size = len(item.data)
                tar.addfile(info, io.BytesIO(item.data))
    return buffer.getvalue()


def write_oci_archive(path: Path, name: str, layer: bytes, entrypoint: list[str], cmd: list[str]) -> None:
    """An OCI image layout in a tar, as `ctr images import` reads it (the image named by
    io.containerd.image.name)."""
    def blob(data: bytes) -> tuple[str, bytes]:
        return "sha256:" + hashlib.sha256(data).hexdigest(), data

    layer_digest, _ = blob(layer)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode()
    config_digest, _ = blob(config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": len(layer)}],
    }, sort_keys=True).encode()
    manifest_digest, _ = blob(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
        "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]},
    }]}).encode()
    entries = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
    for data in (layer, config, manifest):
        entries["blobs/sha256/" + hashlib.sha256(data).hexdigest()] = data
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for entry, data in entries.items():
            info = tarfile.TarInfo(entry)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    partial.replace(path)


def pause_archive(cache_dir: Path) -> Path:
    """The sandbox image's archive, built once per pause.c."""
    source = PAUSE_SOURCE.read_bytes()
    archive = cache_dir / f"pause-{hashlib.sha256(source).hexdigest()[:12]}.oci.tar"
    if archive.is_file():
        return archive
    if shutil.which("gcc") is None:
        raise ImageError("the sandbox image needs gcc (Debian package gcc, with libc6-dev for -static)")
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "pause"
        result = subprocess.run(["gcc", *PAUSE_CFLAGS, "-o", str(binary), str(PAUSE_SOURCE)],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ImageError(f"building the sandbox image: gcc {' '.join(PAUSE_CFLAGS)} {PAUSE_SOURCE}: "
                             f"{result.stderr.strip()}")
        layer = layer_tar([LayerFile("pause", binary.read_bytes())])
    write_oci_archive(archive, DEFAULT_SANDBOX_IMAGE, layer, ["/pause"], [])
    return archive


def test_image_archive(cache_dir: Path) -> Path:
    """The busybox test image's archive, built once per busybox binary and applet list."""
    if not BUSYBOX.is_file():
        raise ImageError(f"the real nodes' test image needs {BUSYBOX} (Debian package busybox-static)")
    busybox = BUSYBOX.read_bytes()
    key = hashlib.sha256(busybox + " ".join(BUSYBOX_APPLETS).encode()).hexdigest()[:12]
    archive = cache_dir / f"busybox-{key}.oci.tar"
    if archive.is_file():
        return archive
    files = [LayerFile("bin/busybox", busybox)]
    files += [LayerFile(f"bin/{applet}", link="busybox") for applet in BUSYBOX_APPLETS]
    files += [LayerFile("tmp/.keep", b"", 0o644), LayerFile("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644),
              LayerFile("etc/group", b"root:x:0:\n", 0o644)]
    write_oci_archive(archive, TEST_IMAGE, layer_tar(files), ["/bin/sh"], [])
    return archive


def imported_images(node: NodeLayout, address: Path) -> set[str]:
    """The images in the node's containerd (address: its socket as the machine reaches it)."""
    result = subprocess.run(["ctr", "--address", str(address), "-n", CONTAINERD_NAMESPACE,
                             "images", "list", "-q"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(f"listing the images of node {node.name}: {result.stderr.strip()}")
    return set(result.stdout.split())


def import_archive(node: NodeLayout, address: Path, archive: Path) -> None:
    """Imports (and unpacks) an OCI or docker archive into the node's containerd."""
    result = subprocess.run(["ctr", "--address", str(address), "-n", CONTAINERD_NAMESPACE,
                             "images", "import", str(archive)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageError(f"importing {archive} into node {node.name}: {result.stderr.strip()}")


def discard_unpacked_layers(address: Path) -> int:
    """Deletes the compressed layer blobs that containerd has unpacked into its snapshots (they carry
    the `containerd.io/uncompressed` label); returns how many. Containers start from the snapshots;
    the image keeps its manifest and config. What CRI's discard_unpacked_layers does for pulls, done
    here for imports: each node then holds one copy of an image, unpacked."""
    base = ["ctr", "--address", str(address), "-n", CONTAINERD_NAMESPACE, "content"]
    labelled = subprocess.run([*base, "ls"], capture_output=True, text=True, check=False)
    if labelled.returncode != 0:
        raise ImageError(f"listing the content of {address}: {labelled.stderr.strip()}")
    unpacked = [line.split()[0] for line in labelled.stdout.splitlines()[1:] if "containerd.io/uncompressed=" in line]
    if not unpacked:
        return 0
    removed = subprocess.run([*base, "rm", *unpacked], capture_output=True, text=True, check=False)
    if removed.returncode != 0:
        raise ImageError(f"discarding unpacked layers in {address}: {removed.stderr.strip()}")
    return len(unpacked)
