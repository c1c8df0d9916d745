"""Kubeconfig files: one per client identity, with the certificates embedded (self-contained)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

from localcluster.control.pki import Pki

CLUSTER_NAME = "kubetest2-training-local"


def write_kubeconfig(path: Path, server: str, pki: Pki, identity: str) -> Path:
    """Writes a kubeconfig for `identity` (a name in pki.CLIENT_IDENTITIES); returns its path.

    Embedded data rather than paths: the admin kubeconfig is copied around (artifacts, CI), and
    then still works.
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {
            "server": server, "certificate-authority-data": _b64(pki.ca_cert)}}],
        "users": [{"name": identity, "user": {
            "client-certificate-data": _b64(pki.client_cert(identity)),
            "client-key-data": _b64(pki.client_key(identity))}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": identity}}],
        "current-context": CLUSTER_NAME,
    }
    text = yaml.safe_dump(config, sort_keys=False)
    if path.is_file() and path.read_text() == text:
        return path
    # Replaced atomically: tests and tools read the kubeconfig while another `up` runs.
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.chmod(0o600)
    os.replace(partial, path)
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
