"""netd: the two ways across the border of the cluster network, for a control plane on 127.0.0.1.

- In: the API server's egress selector sends its traffic to nodes and pods (kubelet's logs, exec,
  port-forward; proxies) as HTTP CONNECT over a unix socket (`--egress-selector-config-file`,
  `cluster`, `transport: uds`). netd dials addresses of the cluster network from inside the cluster
  namespace and 127.0.0.1 (kwok's kubelet endpoint, webhooks of controllers on the machine) from
  the machine; it refuses any other address.
- Out: a forwarder per port (`--forward-port`: the API server's, the image registry's) listens on
  the cluster bridge's address, at that port, inside the cluster namespace, and joins each
  connection to the same port on the machine's 127.0.0.1. The `kubernetes` Service's endpoint is
  that address: pods, kubelets, kube-proxy and CoreDNS reach the API server through it; the nodes'
  containerd reaches the registry (registry.py) through it.
A socket belongs to the network namespace of the thread that made it: the namespaced sockets are
made by short threads that entered the cluster namespace (linux.in_netns); the rest of netd stays
in the machine's namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import sys
import threading
from datetime import datetime
from pathlib import Path

from localcluster.base import linux
from localcluster.base.layout import CLUSTER_CIDRS, GATEWAY_IP

LOOPBACK = "127.0.0.1"
NETWORKS = [ipaddress.ip_network(cidr) for cidr in CLUSTER_CIDRS]
DIAL_TIMEOUT_S = 10
MAX_HEADER = 16384


def log(message: str) -> None:
    print(f"[netd {datetime.now():%H:%M:%S}] {message}", flush=True)


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies source to sink until EOF, then half-closes sink (the other direction goes on)."""
    try:
        # 1 MiB reads: the registry's image layers (GBs) cross here; 64 KiB cost four times the calls.
        while data := source.recv(1 << 20):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def join(a: socket.socket, b: socket.socket) -> None:
    """Copies both ways until both ends are done, then closes both."""
    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join()
    a.close()
    b.close()


def where(host: str) -> str | None:
    """'cluster', 'machine', or None (refused) for a CONNECT target."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if str(address) == LOOPBACK:
        return "machine"
    if any(address in network for network in NETWORKS):
        return "cluster"
    return None


class Netd:
    def __init__(self, netns: str, socket_path: Path, forward_ports: list[int]) -> None:
        self.netns, self.socket_path, self.forward_ports = netns, socket_path, forward_ports

    def dial(self, host: str, port: int) -> socket.socket:
        side = where(host)
        if side is None:
            raise PermissionError(f"{host} is neither in {', '.join(CLUSTER_CIDRS)} nor {LOOPBACK}")
        if side == "cluster":
            return linux.in_netns(self.netns, lambda: socket.create_connection((host, port), DIAL_TIMEOUT_S))
        return socket.create_connection((host, port), DIAL_TIMEOUT_S)

    def serve_connect(self, client: socket.socket) -> None:
        """One HTTP CONNECT from the API server: answer 200 and join, or an error status."""
        header = b""
        while b"\r\n\r\n" not in header and len(header) < MAX_HEADER:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            header += chunk
        head, _, rest = header.partition(b"\r\n\r\n")
        request = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
        if len(request) != 3 or request[0] != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            client.close()
            return
        host, _, port = request[1].rpartition(":")
        try:
            upstream = self.dial(host.strip("[]"), int(port))
        except (OSError, ValueError) as error:
            log(f"CONNECT {request[1]}: {error}")
            status = b"403 Forbidden" if isinstance(error, PermissionError) else b"502 Bad Gateway"
            client.sendall(b"HTTP/1.1 " + status + b"\r\n\r\n")
            client.close()
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if rest:
            upstream.sendall(rest)
        join(client, upstream)

    @staticmethod
    def forward(client: socket.socket, port: int) -> None:
        try:
            upstream = socket.create_connection((LOOPBACK, port), DIAL_TIMEOUT_S)
        except OSError as error:
            log(f"{LOOPBACK}:{port}: {error}")
            client.close()
            return
        join(client, upstream)

    def accept_forever(self, listener: socket.socket, handler: object, *args: object) -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=handler, args=(client, *args), daemon=True).start()

    def run(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with linux.umask(0o077):  # the API server (root) is its only client
            uds.bind(str(self.socket_path))
        uds.listen(128)

        def listener_on(port: int) -> socket.socket:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((GATEWAY_IP, port))
            listener.listen(512)
            return listener

        for port in self.forward_ports:
            listener = linux.in_netns(self.netns, lambda port=port: listener_on(port))
            threading.Thread(target=self.accept_forever, args=(listener, self.forward, port), daemon=True).start()
        ports = ",".join(map(str, self.forward_ports))
        log(f"egress (CONNECT) on {self.socket_path}; forwarding {GATEWAY_IP}:{{{ports}}} in {self.netns} "
            f"-> {LOOPBACK}")
        self.accept_forever(uds, self.serve_connect)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="netd", description=__doc__.splitlines()[0])
    parser.add_argument("--netns", required=True, help="the cluster network namespace")
    parser.add_argument("--socket", type=Path, required=True, help="unix socket of the API server's egress")
    parser.add_argument("--forward-port", type=int, action="append", required=True,
                        help="a port on 127.0.0.1 to serve on the cluster bridge's address (repeatable)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("netd: needs root (it enters the cluster's network namespace)")
    Netd(args.netns, args.socket, args.forward_port).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
