"""A real node's holder: the process that owns the node's mount namespace.

It enters the node's network namespace, makes a mount namespace of its own (a slave of the
machine's: the machine's mounts show inside, nothing made inside shows outside), and mounts there:
- a tmpfs on /run: containerd's state and shim sockets, the pods' network namespaces
  (/run/netns/cni-*), iptables' lock, all private to the node;
- the node's folders on /var/lib and /var/log: CNI's caches, the pods' logs and
  /var/log/containers, which kubelet and containerd write at fixed paths;
- read-only files over the six /proc/sys entries kubelet checks at start (overcommit, panic, ...),
  holding the values it wants: with `protectKernelDefaults` it then neither fails nor writes the
  machine's kernel settings (the real files are global, not per namespace).
containerd, kubelet and kube-proxy then join this namespace (manager.py). When the last process
in it exits, the kernel drops every mount made in it: a crash leaves no mount behind.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from localcluster.base import linux

# What kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
READY_FILE = "holder.ready"


def make_namespace(netns: str, node_dir: Path) -> None:
    linux.setns(linux.netns_path(netns), linux.CLONE_NEWNET)
    linux.unshare(linux.CLONE_NEWNS)
    linux.mount("none", "/", None, linux.MS_REC | linux.MS_SLAVE)
    linux.mount("tmpfs", "/run", "tmpfs", 0, "mode=0755")
    for target in ("var/lib", "var/log"):
        source = node_dir / target.replace("/", "-")
        source.mkdir(parents=True, exist_ok=True)
        linux.mount(str(source), f"/{target}", None, linux.MS_BIND)
    tunables = node_dir / "kernel-tunables"
    tunables.mkdir(exist_ok=True)
    for key, value in KUBELET_KERNEL_TUNABLES.items():
        fake = tunables / key.replace("/", ".")
        fake.write_text(f"{value}\n")
        linux.mount(str(fake), f"/proc/sys/{key}", None, linux.MS_BIND)
        linux.mount("none", f"/proc/sys/{key}", None, linux.MS_BIND | linux.MS_RDONLY | linux.MS_REMOUNT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="holder", description=__doc__.splitlines()[0])
    parser.add_argument("--netns", required=True, help="the node's network namespace (ip netns name)")
    parser.add_argument("--node-dir", type=Path, required=True, help="the node's folder")
    args = parser.parse_args(argv)
    make_namespace(args.netns, args.node_dir)
    (args.node_dir / READY_FILE).write_text("ready\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
