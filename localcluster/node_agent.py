"""The node agent: plays the kubelet's container side for kwok's nodes.

For each pod bound to a node it either runs the pod for real or serves canned logs:
- real (every pod, except those below): each container's command runs as a local process
  (executor.py); its output is the container log, its exit code the container's state and the
  pod's phase. The agent marks such pods `kubetest2-training.local/executed-by: node-agent` and
  writes their status itself (pods/status); kwok's stages leave them alone. MPIJob pods run so
  too, mpirun reaching its workers through an ssh stand-in (mpi_pods.py).
- canned (canned_pods.py): pods with a `kubetest2-training.local/canned-log[-<container>]` or
  `kubetest2-training.local/fail` annotation (fault injection, GPU output) and pods with a
  container without `command` (the image's entrypoint is unknown here); kwok's stages drive them.

Either way kwok serves `pods/log` from the files a `Logs` object names (pod_files.py). Pods run for
real on a node labelled `kubetest2-training.local/slow=<fraction>` are slowed down (slow_nodes.py);
on a node labelled `kubetest2-training.local/cpus=<cores>` they get that many of the machine's cores
(node_cpus.py), as a node with its own CPUs.
The NVIDIA device plugin's GPU sharing is played on the kwok GPU nodes (gpu_sharing.py).

Pods bound to any other node (a real node's kubelet runs them, real_nodes/) are not the agent's.

Run by `hack/local-cluster up` as `python -m localcluster.node_agent`.

May import: localcluster.base, localcluster.control, localcluster.hostnodes, localcluster.emulation.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from localcluster.base.annotations import (
    EXECUTED_ANNOTATION,
    EXECUTED_BY,
    JOB_NAME_LABEL,
    LOGS_READY_ANNOTATION,
    STANDS_IN_FOR_ANNOTATION,
)
from localcluster.base.settings import REPO_DIR
from localcluster.control.api import ApiClient, ApiError
from localcluster.control.components import KWOK_NODE_LABEL, KWOK_NODE_LABEL_VALUE
from localcluster.control.pki import Pki
from localcluster.emulation.canned_pods import CannedPods, canned_by_annotation
from localcluster.emulation.gpu_sharing import GpuSharing
from localcluster.emulation.node_cpus import NodeCpus, cgroup_parent
from localcluster.emulation.slow_nodes import SlowNodes
from localcluster.hostnodes.container_env import PodObjects
from localcluster.hostnodes.container_view import PodView
from localcluster.hostnodes.executor import STOP_GRACE_DEFAULT_S, PodContext, PodRun
from localcluster.hostnodes.loopback_names import LoopbackNames, PortAllocator
from localcluster.hostnodes.mpi_pods import MpiPodAdapter, PodDns, mpi_role
from localcluster.hostnodes.pod_files import PodFiles, all_containers, apply_logs
from localcluster.hostnodes.pod_status import agent_log, orphaned_status

TERMINAL_PHASES = ("Succeeded", "Failed")


def venv_bin() -> Path:
    """The project's venv (the workloads' environment stands in for the image), else ours."""
    candidate = REPO_DIR / ".venv" / "bin"
    return candidate if (candidate / "python").exists() else Path(sys.executable).parent


def runs_for_real(pod: dict[str, Any]) -> bool:
    """See the module docstring: real unless canned by annotation or entrypoint-less."""
    return not canned_by_annotation(pod) and all(c.get("command") for c in all_containers(pod))


class NodeAgent:
    """Gives every scheduled pod its containers' processes or its canned logs (see the module docstring)."""

    def __init__(self, api: ApiClient, pod_logs_dir: Path, canned_logs_dir: Path, default_canned_log: str,
                 scratch_dir: Path | None = None, cpus_cgroup: str | None = None) -> None:
        self.api = api
        self.files = PodFiles(pod_logs_dir, scratch_dir or pod_logs_dir.parent / "pod-scratch")
        self.dns = PodDns(pod_logs_dir.parent / "pod-dns")
        self.gpus = GpuSharing(api)
        self.canned = CannedPods(api, self.files, canned_logs_dir, default_canned_log, self.gpus)
        self.handled_uids: set[str] = set()
        self.runs: dict[str, PodRun] = {}
        self.runs_lock = threading.Lock()
        self.ports = PortAllocator()
        self.venv_bin = venv_bin()
        # Nodes' own CPUs (node_cpus.py) in cgroups under `cpus_cgroup`; None: the label is ignored.
        cpus = None if cpus_cgroup is None else (
            lambda sessions_on, on_change: NodeCpus(cpus_cgroup, sessions_on, on_change, agent_log))
        self.slow = SlowNodes(api, self.runs_on, cpus)
        self.kwok_nodes: dict[str, bool] = {}

    def run_forever(self) -> None:
        """Follows the nodes (slow ones, in a thread) and the pods (here), forever."""
        threading.Thread(target=self.api.list_then_watch, args=("Node", self.slow.on_list, self.slow.on_event,
                                                                agent_log), daemon=True, name="nodes").start()
        self.slow.cycler.start()
        if self.slow.cpus is not None:
            self.slow.cpus.start()
        threading.Thread(target=self.api.list_then_watch, args=("DaemonSet", self.gpus.on_list, self.gpus.on_event,
                                                                agent_log), daemon=True, name="gpu-sharing").start()
        self.api.list_then_watch("Pod", self.on_pod_list, self.on_pod_event, agent_log)

    def on_pod_list(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self.handle_or_log(pod)
        self.forget_missing({pod["metadata"]["uid"] for pod in pods})

    def on_pod_event(self, event_type: str, pod: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.forget(pod)
        else:
            self.handle_or_log(pod)

    def handle_or_log(self, pod: dict[str, Any]) -> None:
        """One pod's failure (say, its namespace is terminating) must not stop the others."""
        try:
            self.handle(pod)
        except (ApiError, OSError) as error:
            meta = pod["metadata"]
            agent_log(f"pod {meta['namespace']}/{meta['name']}: {error}")

    def handle(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with self.runs_lock:
            run = self.runs.get(meta["uid"])
        if run is not None:
            if meta.get("deletionTimestamp") and not run.stopping.is_set():
                self.stop_deleted(run, meta.get("deletionGracePeriodSeconds"))
            return
        if meta["uid"] in self.handled_uids:
            if pod.get("status", {}).get("phase") in TERMINAL_PHASES:
                self.canned.ended(pod)
            return
        if not pod["spec"].get("nodeName") or not self.is_kwok_node(pod["spec"]["nodeName"]):
            return
        annotations = meta.get("annotations") or {}
        if annotations.get(EXECUTED_ANNOTATION) == EXECUTED_BY:
            self.orphaned(pod)  # ran under an earlier agent process
            return
        if meta.get("deletionTimestamp"):
            return  # deleted before it ever ran: nothing will ask for its logs
        # A pod an earlier agent gave canned logs (logs-ready), or one already past Pending, stays
        # as it is: running a pod a second time is no kubelet's behaviour.
        started = annotations.get(LOGS_READY_ANNOTATION) == "true" or \
            pod.get("status", {}).get("phase", "Pending") != "Pending"
        if runs_for_real(pod) and not started:
            self.execute(pod)
        else:
            self.canned.serve(pod)
            self.handled_uids.add(meta["uid"])

    def is_kwok_node(self, name: str) -> bool:
        """Whether kwok plays the node (its label); a real node's kubelet runs its own pods."""
        if name not in self.kwok_nodes:
            node = self.api.get_or_none("Node", name)
            if node is None:
                return False  # gone (or not yet visible): nothing to run; asked again next event
            labels = node["metadata"].get("labels") or {}
            self.kwok_nodes[name] = labels.get(KWOK_NODE_LABEL) == KWOK_NODE_LABEL_VALUE
        return self.kwok_nodes[name]

    @staticmethod
    def stop_deleted(run: PodRun, grace: int | None) -> None:
        run.deleted.set()
        run.stopping.set()
        threading.Thread(target=run.stop, args=(STOP_GRACE_DEFAULT_S if grace is None else grace,),
                         daemon=True, name=f"stop-{run.name}").start()

    # ---- real execution ---------------------------------------------------------------------------

    def execute(self, pod: dict[str, Any]) -> None:
        """Marks the pod as the agent's (kwok's stages then leave it alone), serves its log files
        through a Logs object, and starts its containers (executor.PodRun)."""
        meta = pod["metadata"]
        stands_in = ",".join(f"{c['name']}={c.get('image', '')}" for c in all_containers(pod))
        # Marked first: from here on kwok's stages do not touch the pod.
        self.api.merge_patch("Pod", meta["name"], {"metadata": {"annotations": {
            EXECUTED_ANNOTATION: EXECUTED_BY, STANDS_IN_FOR_ANNOTATION: stands_in}}}, meta["namespace"])
        entries = []
        for container in all_containers(pod):
            container_dir = self.files.logs_dir(pod) / container["name"]
            container_dir.mkdir(parents=True, exist_ok=True)
            (container_dir / "0.log").touch()
            entries.append({"containers": [container["name"]], "logsFile": str(container_dir / "0.log"),
                            "previousLogsFile": str(container_dir / "previous.log")})
        apply_logs(self.api, pod, entries)
        run = PodRun(self.pod_context(pod), self.finished)
        with self.runs_lock:
            self.runs[meta["uid"]] = run
        self.handled_uids.add(meta["uid"])
        self.dns.register(pod)
        agent_log(f"running pod {meta['namespace']}/{meta['name']} for real ({stands_in})")
        run.start()
        self.slow.pod_started(run)

    def pod_context(self, pod: dict[str, Any]) -> PodContext:
        meta, spec = pod["metadata"], pod["spec"]
        hostname = spec.get("hostname") or meta["name"]
        subdomain = spec.get("subdomain") or (meta.get("labels") or {}).get(JOB_NAME_LABEL) or meta["name"]
        services = {s["metadata"]["name"] for s in self.api.get("Service", namespace=meta["namespace"])["items"]}
        names = LoopbackNames(meta["namespace"], services | {subdomain}, subdomain, hostname, self.ports)
        scratch = self.files.scratch_dir(pod)
        scratch.mkdir(parents=True, exist_ok=True)
        view = PodView(pod, PodObjects(self.api, meta["namespace"]), names, scratch, self.venv_bin)
        adapt = MpiPodAdapter(pod, self.dns, scratch / ".kt2t-bin") if mpi_role(pod) else None
        return PodContext(self.api, self.files.logs_dir(pod), view, adapt, before_signal=self.slow.cycler.release)

    def runs_on(self, node: str) -> list[PodRun]:
        """The node's pods run for real whose containers have not all ended."""
        with self.runs_lock:
            return [run for run in self.runs.values() if run.node == node and not run.finished.is_set()]

    def finished(self, run: PodRun) -> None:
        """All containers done. A deleted pod is then removed (grace 0), as the kubelet does once
        its containers have stopped; the Job controller has seen its final status by then."""
        if run.deleted.is_set():
            self.remove_pod(run.namespace, run.name, run.uid)

    def remove_pod(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                             {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except ApiError as error:
            if error.status not in (404, 409):
                agent_log(f"delete pod {namespace}/{name}: {error}")

    def orphaned(self, pod: dict[str, Any]) -> None:
        """A pod an earlier agent process ran: its processes went with that agent (stopped on exit),
        so a pod still running is reported Failed, and a deleted one is removed."""
        meta = pod["metadata"]
        self.handled_uids.add(meta["uid"])
        if pod.get("status", {}).get("phase") not in TERMINAL_PHASES:
            self.api.merge_patch("Pod", meta["name"], {"status": orphaned_status(pod)}, meta["namespace"], "status")
        if meta.get("deletionTimestamp"):
            self.remove_pod(meta["namespace"], meta["name"], meta["uid"])

    def stop_all(self) -> None:
        """The agent is stopping: its processes go with it (resumed if a slow node held them stopped,
        SIGTERM, then SIGKILL after 5 s)."""
        self.slow.cycler.stop()
        with self.runs_lock:
            runs = list(self.runs.values())
        for run in runs:
            run.stopping.set()
            run.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for run in runs:
            run.finished.wait(timeout=max(0.0, deadline - time.monotonic()))
        for run in runs:
            run.kill_now()
        if self.slow.cpus is not None:
            self.slow.cpus.stop()

    # ---- forgetting pods ----------------------------------------------------------------------------

    def forget(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.runs_lock:
            run = self.runs.pop(uid, None)
        if run is not None:
            run.kill_now()  # gone from the API without a graceful stop (forced deletion)
            run.finished.wait(timeout=10)
        self.handled_uids.discard(uid)
        self.slow.forget(uid)
        self.gpus.release(uid)
        self.dns.unregister(pod)
        self.files.remove(pod)
        self.release_ports()

    def release_ports(self) -> None:
        with self.runs_lock:
            names = [r.ctx.view.names for r in self.runs.values()]
        live = {(n.namespace, n.subdomain) for n in names} | {(n.namespace, s) for n in names for s in n.services}
        self.ports.release_namespace_except(live)

    def forget_missing(self, live_uids: set[str]) -> None:
        """Forgets pods deleted while the agent was not watching, and their files."""
        self.handled_uids &= live_uids
        self.files.remove_missing(live_uids)
        self.dns.remove_missing(live_uids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="API server URL")
    parser.add_argument("--state-dir", type=Path, required=True, help="the local cluster's state folder")
    parser.add_argument("--canned-logs-dir", type=Path, required=True)
    parser.add_argument("--default-canned-log", default="bert-mpirun-32ranks")
    args = parser.parse_args(argv)
    pki = Pki(args.state_dir / "pki")
    api = ApiClient(args.server, pki.ca_cert, pki.client_cert("node-agent"), pki.client_key("node-agent"))
    agent = NodeAgent(api, args.state_dir / "pod-logs", args.canned_logs_dir, args.default_canned_log,
                      cpus_cgroup=cgroup_parent(args.state_dir))

    def on_signal(signum: int, _frame: Any) -> None:
        agent_log(f"signal {signum}: stopping the pods' processes")
        agent.stop_all()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent_log(f"watching pods on {args.server}; real execution with {agent.venv_bin}")
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
