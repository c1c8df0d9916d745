"""How much slower a slow node of the local cluster really is (`hack/local-cluster node-slow`).

For each fraction: label kwok-cpu-1 slow by it, run the same CPU-bound loop (a fixed amount of work)
at once in a pod on kwok-cpu-1 and one on kwok-cpu-0, and divide the two wall times the pods
measured; fraction 0 (no label) shows the noise of the pairing. Also the node agent's CPU while it
duty-cycles. One line per figure, `name: value unit  # how`; progress on stderr.

The cluster is the one the environment names (KT2T_STATE, KT2T_PORT_OFFSET), else a bench cluster
of its own (/tmp/kt2t-bench/slow-cluster, offset 300), brought down at the end if started here.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import uuid
from pathlib import Path

from bench_common import BenchCluster, progress
from kubernetes import client, config

CLUSTER = BenchCluster.from_env(Path("/tmp/kt2t-bench/slow-cluster"), 300)
SLOW_NODE, NORMAL_NODE = "kwok-cpu-1", "kwok-cpu-0"
LOOP = ("import time; start = time.monotonic(); sum(i * i for i in range({work})); "
        "print('wall', time.monotonic() - start, flush=True)")


def agent_cpu_s() -> float:
    """user+sys CPU seconds of the node agent so far (from /proc)."""
    pid = CLUSTER.pid_of("node-agent")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pair(core: client.CoreV1Api, namespace: str, work: int, tag: str) -> tuple[float, float]:
    """Wall times (slow node, normal node) of the same loop run at once on both."""
    for node in (SLOW_NODE, NORMAL_NODE):
        core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{tag}-{node}"},
                                               "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{
                                                   "name": "main", "image": "bench", "command": [
                                                       "python", "-c", LOOP.format(work=work)]}]}})
    walls = []
    for node in (SLOW_NODE, NORMAL_NODE):
        name, deadline = f"{tag}-{node}", time.monotonic() + 300
        while core.read_namespaced_pod(name, namespace).status.phase not in ("Succeeded", "Failed"):
            if time.monotonic() > deadline:
                raise SystemExit(f"pod {name} did not finish within 300 s")
            time.sleep(0.2)
        log = core.read_namespaced_pod_log(name, namespace)
        match = re.fullmatch(r"wall (\S+)\n?", log)
        if not match:
            raise SystemExit(f"pod {name}: unexpected log {log!r}")
        walls.append(float(match.group(1)))
    return walls[0], walls[1]


def measure(core: client.CoreV1Api, namespace: str, fraction: float, repeats: int, work: int) -> None:
    CLUSTER.run("node-slow", SLOW_NODE, str(fraction) if fraction else "off")
    cpu_before, started = agent_cpu_s(), time.monotonic()
    ratios = []
    for repeat in range(repeats):
        slow_s, normal_s = pair(core, namespace, work, f"f{int(fraction * 100)}-{repeat}")
        progress(f"f={fraction}: slow node {slow_s:.2f} s, normal node {normal_s:.2f} s")
        ratios.append(slow_s / normal_s)
    agent_share = (agent_cpu_s() - cpu_before) / (time.monotonic() - started)
    ideal = f"ideal 1/(1-f) = {1 / (1 - fraction):.2f}"
    print(f"slowdown f={fraction}: {statistics.median(ratios):.2f} x  # median of {repeats} "
          f"({', '.join(f'{r:.2f}' for r in ratios)}); {ideal}; node agent CPU {agent_share:.1%} of a core meanwhile",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fractions", nargs="*", type=float, default=[0, 0.25, 0.5, 0.75],
                        help="fractions to measure, 0 for none (default: 0 0.25 0.5 0.75)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs per fraction (default 3)")
    parser.add_argument("--work", type=int, default=40_000_000, help="loop iterations per pod (default 4e7)")
    args = parser.parse_args()
    with CLUSTER.up() as kubeconfig:
        measure_all(kubeconfig, args.fractions, args.repeats, args.work)


def measure_all(kubeconfig: str, fractions: list[float], repeats: int, work: int) -> None:
    core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    namespace = f"bench-slow-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    while not core.list_namespaced_service_account(namespace).items:  # pods wait for `default`
        time.sleep(0.2)
    try:
        for fraction in fractions:
            measure(core, namespace, fraction, repeats, work)
    finally:
        CLUSTER.run("node-slow", SLOW_NODE, "off")
        core.delete_namespace(namespace)


if __name__ == "__main__":
    main()
