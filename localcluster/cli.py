"""Command line of `hack/local-cluster`: up, down, status, nodes, node-not-ready/-ready, node-slow, node-cpus,
stop/restart, load-image, registry, log-file.

May import: localcluster.base, localcluster.control, localcluster.emulation, localcluster.realnodes,
localcluster.cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from localcluster.base.settings import Settings, port_env_names
from localcluster.cluster import ClusterError, LocalCluster, progress, wait_until
from localcluster.control.api import ApiClient, ApiError
from localcluster.control.components import KWOK_NODE_LABEL, KWOK_NODE_LABEL_VALUE
from localcluster.emulation import node_cpus, nodes
from localcluster.realnodes.manager import RealNodeError

EPILOG = f"""\
environment:
  KT2T_STATE          state folder (default ~/.local/state/kubetest2-training/cluster)
  KT2T_CACHE          binary cache (default ~/.cache/kubetest2-training)
  KT2T_NODE_SHAPE     cpu | gpu | p5 | p3 nodes made by `up` (default cpu)
  KT2T_NODE_COUNT     how many (default 2)
  KT2T_NODE_EFA       vpc.amazonaws.com/efa per gpu node (default 0)
  KT2T_DEFAULT_CANNED_LOG  canned log of canned pods that name none: MPIJob pods, pods without a
                      command (default bert-mpirun-32ranks); other pods run for real
  KT2T_WAIT_TIMEOUT   seconds to wait for each component, nodes, ServiceAccount (default 120)
  KT2T_PORT_OFFSET    added to every default port, a multiple of 100 (a second cluster)
  KT2T_REAL_NODES     real nodes (kubelet + containerd) beside the kwok nodes, as `up --real-nodes N`
  ports: {", ".join(f"{env}" for env in port_env_names().values())}

`up` prints the kubeconfig's absolute path as its last line on stdout; progress goes to stderr.
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hack/local-cluster", description="A local Kubernetes control plane with kwok nodes (no Docker).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="build or reuse the binaries, start the cluster, print the kubeconfig")
    add_node_options(up, required=False)
    up.add_argument("--real-nodes", type=int, metavar="N",
                    help="N real nodes (kubelet + containerd, instance type container-cpu) beside the kwok "
                         "nodes; needs root; later `up`s keep the count (env KT2T_REAL_NODES; 0 removes them)")
    load = commands.add_parser("load-image", help="import image archives (OCI or docker) into every real node")
    load.add_argument("archives", nargs="+", type=Path)
    commands.add_parser("registry", help="the real nodes' image registry's address (push with `hack/images push "
                                         "ADDRESS`; pods name images ADDRESS/...); exit 1 without real nodes")
    log_file = commands.add_parser("log-file", help="the path of one component's log (e.g. elasticjob-operator: "
                                                    "hack/main-job passes it as DLROVER_OPERATOR_LOG)")
    log_file.add_argument("component")
    commands.add_parser("down", help="stop what `up` started and remove the state folder")
    commands.add_parser("status", help="what runs: pid, port, healthy (exit 1 unless all healthy)")
    replace_nodes = commands.add_parser("nodes", help="replace the fake nodes with nodes of a shape")
    add_node_options(replace_nodes, required=True)
    for name, verb in (("stop", "stop one component (an outage; `up` or `restart` starts it again)"),
                       ("restart", "stop one component and start it again, same state")):
        command = commands.add_parser(name, help=verb)
        command.add_argument("component", help="etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                                               "kwok, mpi-operator or node-agent")
    for name, verb in (("node-not-ready", "turn NotReady"), ("node-ready", "turn Ready again")):
        command = commands.add_parser(name, help=f"make a node {verb} (through a kwok stage)")
        command.add_argument("node")
    slow = commands.add_parser("node-slow", help="slow a node's pods down: the node agent stops their processes "
                                                 "FRACTION of every 100 ms (SIGSTOP/SIGCONT); `off` ends it")
    slow.add_argument("node")
    slow.add_argument("fraction", type=off_or(nodes.parse_slow_fraction),
                      help="share of each period stopped, strictly between 0 and 1 (0.5 halves the speed), or off")
    cpus = commands.add_parser("node-cpus", help="give a node's pods their own share of this machine's cores: the node "
                                                 "agent runs them in a cgroup with that CFS quota; `off` ends it")
    cpus.add_argument("node")
    cpus.add_argument("cores", type=off_or(node_cpus.parse_cores),
                      help="cores (0.4 is 40%% of one core, 2 two cores), or off")
    return parser.parse_args(argv)


def off_or(parse: Callable[[str], float]) -> Callable[[str], float | None]:
    """An argument that is `off` (None) or what `parse` makes of it; its ValueError, as argparse's error."""

    def argument(text: str) -> float | None:
        if text == "off":
            return None
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{error}; or `off`") from None

    return argument


def add_node_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--shape", choices=sorted(nodes.SHAPES), required=required,
                        help="node shape (env KT2T_NODE_SHAPE)")
    parser.add_argument("--count", type=int, help="number of nodes (env KT2T_NODE_COUNT)")
    parser.add_argument("--efa", type=int, help="vpc.amazonaws.com/efa per node, gpu shape (env KT2T_NODE_EFA)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    settings = Settings.from_env()
    if getattr(args, "shape", None):
        settings = replace(settings, node_shape=args.shape)
    if getattr(args, "count", None) is not None:
        settings = replace(settings, node_count=args.count)
    if getattr(args, "efa", None) is not None:
        settings = replace(settings, node_efa=args.efa)
    if getattr(args, "real_nodes", None) is not None:
        settings = replace(settings, real_nodes=args.real_nodes)
    cluster = LocalCluster(settings)
    try:
        return run(cluster, args)
    except (ClusterError, ApiError, RealNodeError) as error:
        print(f"local-cluster {args.command}: {error}", file=sys.stderr)
        return 1


def run(cluster: LocalCluster, args: argparse.Namespace) -> int:
    settings = cluster.settings
    if args.command == "up":
        print(cluster.up().absolute())
        return 0
    if args.command == "down":
        stopped = cluster.down()
        progress(f"down: stopped {', '.join(stopped) or 'nothing'}; removed {settings.state_dir}")
        return 0
    if args.command == "status":
        rows = cluster.status()
        print(f"{'COMPONENT':<24}{'PID':>8}{'PORT':>7}  HEALTHY")
        for row in rows:
            healthy = "yes" if row["healthy"] else "no"
            print(f"{row['name']:<24}{row['pid'] or '-':>8}{row['port'] or '-':>7}  {healthy}")
        print(f"state: {settings.state_dir}")
        print(f"kubeconfig: {settings.kubeconfig}")
        if any(row["name"] == "kube-apiserver" and row["healthy"] for row in rows):
            described = [f"{n['metadata']['name']} ({n['metadata']['labels'].get(nodes.INSTANCE_TYPE_LABEL)}, "
                         f"{'Ready' if nodes.node_is_ready(n) else 'NotReady'})"
                         for n in nodes.managed_nodes(cluster.api())]
            print(f"nodes: {', '.join(described) or 'none'}")
        return 0 if all(row["healthy"] for row in rows) else 1
    if args.command == "registry":
        real = cluster.real_nodes()
        if real.wanted() == 0:
            raise RealNodeError("no registry: it runs with the real nodes (`up --real-nodes N`)")
        print(real.registry_address())
        return 0
    if args.command == "log-file":
        found = [c for c in cluster.components() if c.name == args.component]
        if not found:
            raise ClusterError(f"no component {args.component!r}: expected one of "
                               f"{', '.join(c.name for c in cluster.components())}")
        print(cluster.log_file(found[0]))
        return 0
    if args.command == "load-image":
        with cluster.locked():
            for archive in args.archives:
                loaded = cluster.real_nodes().load_image(archive)
                progress(f"{archive}: imported into {', '.join(loaded) or 'no real node (none runs)'}")
        return 0
    if args.command == "stop":
        stopped = cluster.stop(args.component)
        progress(f"{args.component}: {'stopped' if stopped else 'was not running'}")
        return 0
    if args.command == "restart":
        cluster.restart(args.component)
        return 0
    api = cluster.api()
    if args.command == "nodes":
        with cluster.locked():
            created = nodes.replace_nodes(api, settings.node_shape, settings.node_count, settings.node_efa)
            cluster.real_nodes().prefer_real_nodes(api)
            cluster.wait_usable()
        progress(f"nodes: {', '.join(created)} ({settings.node_shape}) Ready")
        return 0
    if args.command == "node-slow":
        return node_slow(api, args.node, args.fraction, settings.wait_timeout_s)
    if args.command == "node-cpus":
        return node_cores(api, args.node, args.cores, settings)
    return node_readiness(api, args.node, args.command == "node-not-ready", settings.wait_timeout_s)


def node_readiness(api: ApiClient, node: str, not_ready: bool, timeout_s: float) -> int:
    nodes.set_not_ready(api, node, not_ready)
    reached = (lambda n: not nodes.node_is_ready(n)) if not_ready else nodes.node_accepts_pods
    wait_until(lambda: reached(api.get("Node", node)), timeout_s,
               f"node {node} to be {'NotReady' if not_ready else 'Ready and untainted'}")
    progress(f"node {node}: {'NotReady' if not_ready else 'Ready'}")
    return 0


def node_cores(api: ApiClient, node: str, cores: float | None, settings: Settings) -> int:
    """Labels the node and waits until the node agent has applied it to the node's cgroup."""
    try:
        hierarchy = node_cpus.CpuHierarchy.find()
    except node_cpus.CgroupUnavailable as error:
        raise ClusterError(str(error)) from None
    labels = api.get("Node", node)["metadata"].get("labels") or {}
    if labels.get(KWOK_NODE_LABEL) != KWOK_NODE_LABEL_VALUE:
        raise ClusterError(f"{node} is not a host-process (kwok) node: its kubelet runs its pods, with its own CPU "
                           "limits; node-cpus applies to the nodes the node agent runs pods for")
    nodes.set_cpus(api, node, cores)
    folder = hierarchy.root / node_cpus.cgroup_parent(settings.state_dir) / node
    # What the cgroup holds once applied: the quota is whole microseconds, so compare with that.
    applied = None if cores is None else node_cpus.quota_us(cores) / node_cpus.PERIOD_US
    wait_until(lambda: hierarchy.quota_cores(folder) == applied, settings.wait_timeout_s,
               f"the node agent to limit node {node} to {cores if cores is not None else 'all'} cores ({folder})")
    progress(f"node {node}: " + (f"its pods get {cores:g} of this machine's cores" if cores else "all cores"))
    return 0


def node_slow(api: ApiClient, node: str, fraction: float | None, timeout_s: float) -> int:
    nodes.set_slow(api, node, fraction)
    wait_until(lambda: nodes.slow_fraction(api.get("Node", node)) == fraction, timeout_s,
               f"node {node} to show {nodes.SLOW_LABEL}={fraction if fraction is not None else '(none)'}")
    progress(f"node {node}: " + (f"slow, its pods stopped {fraction:.0%} of the time" if fraction else "full speed"))
    return 0
