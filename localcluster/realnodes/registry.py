"""The real nodes' image registry: Debian's `docker-registry` (the CNCF distribution registry).

It listens on the machine's 127.0.0.1 at the `registry` port, as every server of the cluster does:
`hack/images push 127.0.0.1:<port>` pushes there from the machine. netd forwards the cluster
bridge's address at the same port to it, and each node's containerd maps the name
`127.0.0.1:<port>` to that address over plain HTTP (certs.d/<name>/hosts.toml, configs.py): an
image has one name on the machine and in every pod spec, and the nodes pull it as a cluster's
nodes pull from any registry, with the pod's imagePullPolicy. Its blobs live in the state folder
(`down` removes them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localcluster.base.layout import GATEWAY_IP
from localcluster.base.settings import LOOPBACK

COMMAND = "docker-registry"


def address(port: int) -> str:
    """The registry's name, on the machine and in the nodes' image references."""
    return f"{LOOPBACK}:{port}"


def config(storage: Path, port: int) -> dict[str, Any]:
    """distribution's configuration: filesystem storage in the state folder, HTTP on 127.0.0.1,
    deletes allowed (a test may remove a tag), no authentication (nothing but this machine and the
    cluster network reaches it)."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True},
                    "cache": {"blobdescriptor": "inmemory"}},
        "http": {"addr": address(port), "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }


def hosts_toml(port: int) -> str:
    """containerd's hosts.toml for the name `127.0.0.1:<port>`: pull and resolve from the cluster
    bridge's address (netd's forwarder), plain HTTP. Inside a node 127.0.0.1 is the node's own."""
    server = f"http://{GATEWAY_IP}:{port}"
    return f'''server = "{server}"

[host."{server}"]
  capabilities = ["pull", "resolve"]
'''
