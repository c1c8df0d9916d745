"""Which network NCCL used, per host, from its NCCL_DEBUG=INFO lines: with EFA expected on a
multi-node job every host must show the EFA path (aws-ofi-nccl: `NET/OFI`, network `Libfabric`)
and none may show NCCL's socket transport (`NET/Socket`), the silent fallback when the image lacks
libfabric or the plugin. The lines NCCL 2.2x and aws-ofi-nccl print:

    host:pid:tid [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)
    host:pid:tid [0] NCCL INFO Using network Libfabric          (NCCL's choice of network)
    host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA
    host:pid:tid [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>   (the socket transport's init)
    host:pid:tid [0] NCCL INFO Using network Socket
    host:pid:tid [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0

`Bootstrap : Using eth0` is NCCL's own rendezvous over TCP, present either way, and not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.metrics.log_lines import split_tag
from harness.verdict.checks import Check, declare

EFA_NCCL_NET = declare(
    "efa.nccl_net",
    "EFA is expected but a host's NCCL used its socket transport (NET/Socket), or showed no NET/OFI or NET/Libfabric "
    "line, or a node of the job had no host that logged its network (not applicable when the user set an "
    "`NCCL_DEBUG` level that logs none)",
    "-",
    settings=("EFA_PER_NODE", "--efaEnabled"),
    only_when="EFA is expected (EFA devices on the nodes or `--efaEnabled`) on a multi-node job",
)

NCCL_INFO = " NCCL INFO "
SOCKET_MARKERS = ("NET/Socket", "Using network Socket")
EFA_MARKERS = ("NET/OFI", "NET/Libfabric", "NET/AWS Libfabric", "Using network Libfabric",
               "Using network AWS Libfabric")
MAX_NAMED = 5


@dataclass
class HostNet:
    """What one host's (pod's) NCCL INFO lines said of the network."""

    host: str
    node: str
    efa: str | None = None  # the first line showing the EFA path
    socket: str | None = None  # the first line showing the socket transport
    info_lines: int = 0


@dataclass
class NcclNetScan:
    """NCCL INFO lines of a job, by host (the line's `host:pid:tid` prefix, else the pod's log)."""

    hosts: dict[str, HostNet] = field(default_factory=dict)

    def feed(self, line: str, pod: str, node: str, node_of_host: Mapping[str, str]) -> None:
        _, text = split_tag(line)  # mpirun's `[1,3]<stdout>:` tag, when the launcher's log holds every rank
        at = text.find(NCCL_INFO)
        if at < 0:
            return
        head = text[:at].split()  # `host:pid:tid [dev]`
        host = head[0].split(":", 1)[0] if head and head[0].count(":") >= 2 else pod
        if host != pod and host not in node_of_host:
            host = f"{host} (pod {pod})"  # a host name no pod has: the pod that printed it ran it
        entry = self.hosts.setdefault(host, HostNet(host, node_of_host.get(host, node)))
        entry.info_lines += 1
        text = text[at + len(NCCL_INFO):].strip()
        if entry.socket is None and any(marker in text for marker in SOCKET_MARKERS):
            entry.socket = text
        elif entry.efa is None and any(marker in text for marker in EFA_MARKERS):
            entry.efa = text


def scan_nccl_net(logs: Iterable[tuple[str, str, Iterable[str]]], node_of_host: Mapping[str, str]) -> NcclNetScan:
    """Scan each (pod, node, lines) of a job; node_of_host maps a host name (a pod's name or
    hostname) to its node, for lines a launcher's log holds for every rank."""
    scan = NcclNetScan()
    for pod, node, lines in logs:
        for line in lines:
            scan.feed(line, pod, node, node_of_host)
    return scan


def _named(entries: list[HostNet], quote: bool) -> str:
    """`host on node N: <its socket line>; ...` for the first MAX_NAMED hosts."""
    shown = "; ".join(f"{e.host} on node {e.node}" + (f" ({(e.socket or '')[:160]!r})" if quote else "")
                      for e in entries[:MAX_NAMED])
    return shown + (f" and {len(entries) - MAX_NAMED} more" if len(entries) > MAX_NAMED else "")


NAME = EFA_NCCL_NET.name


def check_nccl_net(scan: NcclNetScan, why: str, user_debug: str | None = None,
                   nodes: Iterable[str] = ()) -> Check:
    """EFA expected (`why` says by what): every host used the EFA path and none the socket
    transport, and every one of `nodes` had a host that said so. Not applicable when the user set
    NCCL_DEBUG to a level that logs no network."""
    name = NAME
    if user_debug is not None and user_debug.upper() not in ("INFO", "TRACE"):
        return Check.not_applicable(name, f"NCCL_DEBUG={user_debug} (set by the user): NCCL does not log its network")
    hosts = sorted(scan.hosts.values(), key=lambda e: e.host)
    if not hosts:
        return Check.failed(name, f"efa: {why}, but no log holds an NCCL INFO line to say which network NCCL used "
                                  "(NCCL_DEBUG=INFO was set: did NCCL run at all?)")
    if socket := [e for e in hosts if e.socket is not None]:
        return Check.failed(name, f"efa: {why}, but NCCL used its socket transport (NET/Socket), not EFA, on "
                                  f"{_named(socket, True)}")
    if silent := sorted(set(nodes) - {e.node for e in hosts}):
        return Check.failed(name, f"efa: {why}, but no NCCL INFO line came from node{'s' * (len(silent) > 1)} "
                                  f"{', '.join(silent[:MAX_NAMED])}: which network NCCL used there is unknown")
    if missing := [e for e in hosts if e.efa is None]:
        return Check.failed(name, f"efa: {why}, but NCCL showed no NET/OFI or NET/Libfabric line on "
                                  f"{_named(missing, False)}")
    return Check.passed(name, f"NCCL used EFA (NET/OFI, Libfabric) on all {len(hosts)} hosts")
