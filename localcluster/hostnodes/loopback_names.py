"""Cluster DNS names and rendezvous ports of a pod, rewritten for 127.0.0.1 (every pod of the local
cluster runs on this one machine).

- A name the pod would resolve through the cluster DNS to another pod of a headless Service
  (`<host>.<service>[.<namespace>[.svc[.cluster.local]]]`, the torchrun launcher's
  `MASTER_ADDR=<job>-0.<job>`) is rewritten to 127.0.0.1 in env values and arguments; not in
  mpirun's host lists (`-H`, `--host`): its `ssh` stand-in needs the names to find the pods.
- The rendezvous port a pod passes (`MASTER_PORT`, `PET_MASTER_PORT`, `--master-port[=]`, `--master_port[=]`,
  `--rdzv-endpoint=host:port`) would collide between jobs running at the same time, so each
  (namespace, service, port) gets its own free port, the same for every pod of that job.
- torchrun's c10d rendezvous is told which pod hosts its store by the launcher itself
  (`--rdzv-conf=is_host=`, harness/jobs/launchers/torchrun.py): on 127.0.0.1 its own guess would
  be "yes" in every pod, in a real pod "no" until the cluster DNS has worker 0's record.
"""

from __future__ import annotations

import random
import re
import socket
import threading
from dataclasses import dataclass, field

from localcluster.hostnodes.container_env import ContainerConfigError

LOOPBACK = "127.0.0.1"
# Rendezvous ports come from below the kernel's ephemeral range (32768-60999), so that a port
# handed out here is not taken meanwhile by some outgoing connection's local port.
PORT_RANGE = (30000, 32767)
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
PORT_FLAGS = ("--master-port", "--master_port")
ADDR_FLAGS = ("--master-addr", "--master_addr")
RDZV_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")
# mpirun's host lists: names stay, the ssh stand-in maps them to pods (mpi_pods.py).
HOST_LIST_FLAGS = ("-H", "-host", "--host", "-hostfile", "--hostfile", "-machinefile", "--machinefile",
                   "--default-hostfile")
# Flags whose value may come as the next argument.
VALUE_FLAGS = (*PORT_FLAGS, *ADDR_FLAGS, *RDZV_FLAGS, *HOST_LIST_FLAGS)


@dataclass
class PortAllocator:
    """One free loopback port per (namespace, service, requested port), shared by the pods of a job,
    kept while any pod of the namespace still uses it."""

    ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def port_for(self, namespace: str, service: str, requested: int) -> int:
        key = (namespace, service, requested)
        with self.lock:
            if key not in self.ports:
                self.ports[key] = self._free_port(set(self.ports.values()))
            return self.ports[key]

    def release_namespace_except(self, live: set[tuple[str, str]]) -> None:
        """Forget the ports of (namespace, service) pairs that no live pod uses any more."""
        with self.lock:
            for key in [k for k in self.ports if (k[0], k[1]) not in live]:
                del self.ports[key]

    @staticmethod
    def _free_port(taken: set[int]) -> int:
        candidates = list(range(PORT_RANGE[0], PORT_RANGE[1] + 1))
        random.shuffle(candidates)  # another cluster's agent on this machine draws from the same range
        for port in candidates:
            if port in taken:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((LOOPBACK, port))
                except OSError:
                    continue
            return port
        raise ContainerConfigError(f"no free port in {PORT_RANGE} on {LOOPBACK}")


@dataclass
class LoopbackNames:
    """Rewrites one pod's cluster DNS names and rendezvous ports (see the module docstring)."""

    namespace: str
    services: set[str]  # headless Services of the namespace, plus the pod's own subdomain
    subdomain: str  # the pod's spec.subdomain (its job's Service), else its job name, else its name
    hostname: str  # the pod's spec.hostname, else its name
    ports: PortAllocator

    def _service_of(self, name: str, allow_bare: bool) -> str | None:
        """The Service a DNS name points into, or None when it is not one of this namespace's."""
        ns = re.escape(self.namespace)
        for service in self.services:
            svc = re.escape(service)
            if re.fullmatch(rf"{_LABEL}\.{svc}(?:\.{ns}(?:\.svc(?:\.cluster\.local)?)?)?\.?", name) \
                    or re.fullmatch(rf"{svc}\.{ns}(?:\.svc(?:\.cluster\.local)?)?\.?", name) \
                    or (allow_bare and name == service):
                return service
        return None

    def host(self, name: str, allow_bare: bool = False) -> str:
        return LOOPBACK if self._service_of(name, allow_bare) else name

    def port(self, raw: str, service: str | None = None) -> str:
        if not raw.isdigit():
            return raw
        return str(self.ports.port_for(self.namespace, service or self.subdomain, int(raw)))

    def _dotted_names(self, text: str) -> str:
        """Every dotted cluster name inside a string (a URL, `host:port`) -> 127.0.0.1."""
        def replace(match: re.Match[str]) -> str:
            return self.host(match.group(0))
        return re.sub(rf"(?<![\w.-]){_LABEL}(?:\.{_LABEL})+(?![\w-]|\.\w)", replace, text)

    def endpoint(self, value: str) -> tuple[str, str | None]:
        """`host:port` of a rendezvous endpoint -> (rewritten, the Service its host named)."""
        host, sep, port = value.rpartition(":")
        if not sep:
            host, port = value, ""
        service = self._service_of(host, allow_bare=True)
        if service is None:
            return value, None
        return LOOPBACK + (f":{self.port(port, service)}" if port else ""), service

    def env_value(self, name: str, value: str) -> str:
        # PET_*: what torchrun reads its options from (Kubeflow Trainer's torch plugin sets them).
        if name in ("MASTER_ADDR", "PET_MASTER_ADDR"):
            return self.host(value, allow_bare=True)
        if name in ("MASTER_PORT", "PET_MASTER_PORT"):
            return self.port(value)
        return self._dotted_names(value)

    def argv(self, argv: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(argv):
            flag, eq, value = argv[i].partition("=")
            separate = not eq and flag in VALUE_FLAGS and i + 1 < len(argv)
            if not (eq or separate):
                out.append(self._dotted_names(argv[i]))
                i += 1
                continue
            value = argv[i + 1] if separate else value
            if flag in RDZV_FLAGS:
                value, _ = self.endpoint(value)
            else:
                value = self._flag_value(flag, value)
            out.extend([flag, value] if separate else [f"{flag}={value}"])
            i += 2 if separate else 1
        return out

    def _flag_value(self, flag: str, value: str) -> str:
        if flag in PORT_FLAGS:
            return self.port(value)
        if flag in ADDR_FLAGS:
            return self.host(value, allow_bare=True)
        if flag in HOST_LIST_FLAGS:
            return value
        return self._dotted_names(value)
