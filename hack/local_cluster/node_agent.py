"""The node agent: plays the kubelet's container side for kwok's nodes.

For each pod bound to a node it either runs the pod for real or serves canned logs:
- real (every pod, except those below): each container's command runs as a local process
  (executor.py, container_env.py); its output is the container log, its exit code the
  container's state and the pod's phase. The agent marks such pods
  `kubetest2-training.local/executed-by: node-agent` and writes their status itself
  (pods/status); kwok's stages leave them alone.
- canned: pods with a `kubetest2-training.local/canned-log[-<container>]` or
  `kubetest2-training.local/fail` annotation (fault injection, GPU output), pods of an MPIJob
  (mpirun needs ssh to its workers) and pods with a container without `command` (the image's
  entrypoint is unknown here): every container's log is `hack/canned-logs/<name>.log`, written at
  once, and kwok's stages drive the pod (stage pod-ready waits for the annotation
  `kubetest2-training.local/logs-ready`).

Either way kwok serves `pods/log` from files named by a `Logs` object of the pod's name and
namespace (its ClusterLogs select pods by name and namespace only, not by annotation), which the
agent applies, owned by the pod so that the garbage collector removes it with the pod.

Run by `hack/local-cluster up` as `python -m local_cluster.node_agent`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from .api import ApiClient, ApiError
from .container_env import LoopbackNames, PortAllocator
from .executor import (
    EXECUTED_ANNOTATION,
    EXECUTED_BY,
    STANDS_IN_FOR_ANNOTATION,
    STOP_GRACE_DEFAULT_S,
    PodContext,
    PodRun,
    kill_group,
    mark_exited,
    now_rfc3339,
)
from .pki import Pki
from .settings import REPO_DIR

ANNOTATION_PREFIX = "kubetest2-training.local/"
CANNED_LOG_ANNOTATION = ANNOTATION_PREFIX + "canned-log"
FAIL_ANNOTATION = ANNOTATION_PREFIX + "fail"
LOGS_READY_ANNOTATION = ANNOTATION_PREFIX + "logs-ready"
FIELD_MANAGER = "kubetest2-training-node-agent"
# The canned log of a pod whose failure is injected, unless the pod names one.
FAILURE_CANNED_LOG = "bert-mpirun-missing-env"
# An annotation value becomes a file name: no path separators, no dot-dot.
CANNED_LOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Pods of an MPIJob (launcher and workers) carry this label: mpirun cannot reach its workers here.
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def venv_bin() -> Path:
    """The project's venv (the workloads' environment stands in for the image), else ours."""
    candidate = REPO_DIR / ".venv" / "bin"
    return candidate if (candidate / "python").exists() else Path(sys.executable).parent


def runs_for_real(pod: dict[str, Any]) -> bool:
    """See the module docstring: real unless canned by annotation, an MPIJob's, or entrypoint-less."""
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    if FAIL_ANNOTATION in annotations or any(k.startswith(CANNED_LOG_ANNOTATION) for k in annotations):
        return False
    if MPI_ROLE_LABEL in (meta.get("labels") or {}):
        return False
    containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    return all(c.get("command") for c in containers)


def cri_lines(lines: list[str], start: datetime) -> str:
    """Plain lines -> the CRI log format kwok reads: `<RFC3339Nano> stdout F <line>`."""
    out = []
    for index, line in enumerate(lines):
        stamp = (start + timedelta(microseconds=index)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
        out.append(f"{stamp} stdout F {line}\n")
    return "".join(out)


class NodeAgent:
    """Gives every scheduled pod its container logs (see the module docstring)."""

    def __init__(self, api: ApiClient, pod_logs_dir: Path, canned_logs_dir: Path, default_canned_log: str,
                 scratch_dir: Path | None = None) -> None:
        self.api = api
        self.pod_logs_dir = pod_logs_dir
        self.canned_logs_dir = canned_logs_dir
        self.default_canned_log = default_canned_log
        self.scratch_root = scratch_dir or pod_logs_dir.parent / "pod-scratch"
        self.handled_uids: set[str] = set()
        self.runs: dict[str, PodRun] = {}
        self.runs_lock = threading.Lock()
        self.ports = PortAllocator()
        self.venv_bin = venv_bin()

    def run_forever(self) -> None:
        """List, then watch from the list's version; start over on any error or expired watch."""
        while True:
            try:
                pods = self.api.get("Pod")
                seen_uids = set()
                for pod in pods["items"]:
                    seen_uids.add(pod["metadata"]["uid"])
                    self.handle_or_log(pod)
                self.forget_missing(seen_uids)
                self.follow(pods["metadata"]["resourceVersion"])
            except (ApiError, OSError, ValueError) as error:
                log(f"pod watch interrupted: {error}; starting over")
                time.sleep(1)

    def follow(self, resource_version: str) -> None:
        while True:
            for event in self.api.watch("Pod", resource_version):
                kind, pod = event["type"], event["object"]
                if kind == "ERROR":  # typically 410 Gone: the version expired; list again
                    log(f"watch error: {pod.get('message')}")
                    return
                resource_version = pod["metadata"]["resourceVersion"]
                if kind == "DELETED":
                    self.forget(pod)
                elif kind in ("ADDED", "MODIFIED"):
                    self.handle_or_log(pod)

    def handle_or_log(self, pod: dict[str, Any]) -> None:
        """One pod's failure (say, its namespace is terminating) must not stop the others."""
        try:
            self.handle(pod)
        except (ApiError, OSError) as error:
            meta = pod["metadata"]
            log(f"logs of pod {meta['namespace']}/{meta['name']}: {error}")

    def handle(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with self.runs_lock:
            run = self.runs.get(meta["uid"])
        if run is not None:
            if meta.get("deletionTimestamp") and not run.stopping.is_set():
                grace = meta.get("deletionGracePeriodSeconds")
                run.deleted.set()
                run.stopping.set()
                threading.Thread(target=run.stop, args=(STOP_GRACE_DEFAULT_S if grace is None else grace,),
                                 daemon=True, name=f"stop-{meta['name']}").start()
            return
        if meta["uid"] in self.handled_uids:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                self.canned_pod_ended(pod)
            return
        if not pod["spec"].get("nodeName"):
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
            return
        crash_loops = annotations.get(FAIL_ANNOTATION) == "crashloop"
        pod_dir = self.pod_dir(pod)
        entries = []
        containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
        started = datetime.now(timezone.utc)
        for container in containers:
            name = container["name"]
            content = cri_lines(self.canned_lines(annotations, name), started)
            container_dir = pod_dir / name
            container_dir.mkdir(parents=True, exist_ok=True)
            (container_dir / "0.log").write_text(content)
            entry: dict[str, Any] = {"containers": [name], "logsFile": str(container_dir / "0.log")}
            if crash_loops:
                # The crashed run's output, served for `kubectl logs --previous`; that run is over.
                (container_dir / "previous.log").write_text(content)
                mark_exited(container_dir / "previous.log")
                entry["previousLogsFile"] = str(container_dir / "previous.log")
            entries.append(entry)
        self.apply_logs(pod, entries)
        # kwok starts a pod only once it carries this annotation (stage pod-ready), as a kubelet
        # starts containers only once it can log them: pods/log never misses a running container.
        if annotations.get(LOGS_READY_ANNOTATION) != "true":
            self.api.merge_patch("Pod", meta["name"], {"metadata": {"annotations": {LOGS_READY_ANNOTATION: "true"}}},
                                 meta["namespace"])
        self.handled_uids.add(meta["uid"])

    # ---- real execution ---------------------------------------------------------------------------

    def execute(self, pod: dict[str, Any]) -> None:
        """Marks the pod as the agent's (kwok's stages then leave it alone), serves its log files
        through a Logs object, and starts its containers (executor.PodRun)."""
        meta = pod["metadata"]
        containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
        stands_in = ",".join(f"{c['name']}={c.get('image', '')}" for c in containers)
        # Marked first: from here on kwok's stages do not touch the pod.
        self.api.merge_patch("Pod", meta["name"], {"metadata": {"annotations": {
            EXECUTED_ANNOTATION: EXECUTED_BY, STANDS_IN_FOR_ANNOTATION: stands_in}}}, meta["namespace"])
        pod_dir = self.pod_dir(pod)
        entries = []
        for container in containers:
            container_dir = pod_dir / container["name"]
            container_dir.mkdir(parents=True, exist_ok=True)
            (container_dir / "0.log").touch()
            entries.append({"containers": [container["name"]], "logsFile": str(container_dir / "0.log"),
                            "previousLogsFile": str(container_dir / "previous.log")})
        self.apply_logs(pod, entries)
        spec = pod["spec"]
        hostname = spec.get("hostname") or meta["name"]
        subdomain = spec.get("subdomain") or (meta.get("labels") or {}).get(JOB_NAME_LABEL) or meta["name"]
        services = {s["metadata"]["name"] for s in self.api.get("Service", namespace=meta["namespace"])["items"]}
        names = LoopbackNames(meta["namespace"], services | {subdomain}, subdomain, hostname, self.ports)
        scratch = self.scratch_root / pod_dir.name
        scratch.mkdir(parents=True, exist_ok=True)
        run = PodRun(PodContext(self.api, pod, pod_dir, scratch, self.venv_bin, names), self.finished)
        with self.runs_lock:
            self.runs[meta["uid"]] = run
        self.handled_uids.add(meta["uid"])
        log(f"running pod {meta['namespace']}/{meta['name']} for real ({stands_in})")
        run.start()

    def finished(self, run: PodRun) -> None:
        """All containers done. A deleted pod is then removed (grace 0), as the kubelet does once
        its containers have stopped; the Job controller has seen its final status by then."""
        if run.deleted.is_set():
            try:
                self.api.request("DELETE", f"/api/v1/namespaces/{run.namespace}/pods/{run.name}",
                                 {"gracePeriodSeconds": 0, "preconditions": {"uid": run.uid}})
            except ApiError as error:
                if error.status not in (404, 409):
                    log(f"delete pod {run.namespace}/{run.name}: {error}")

    def orphaned(self, pod: dict[str, Any]) -> None:
        """A pod an earlier agent process ran: its processes went with that agent (stopped on exit),
        so a pod still running is reported Failed, and a deleted one is removed."""
        meta = pod["metadata"]
        self.handled_uids.add(meta["uid"])
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            if meta.get("deletionTimestamp"):
                self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                 {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
            return
        now = now_rfc3339()
        statuses = []
        for container in pod["spec"]["containers"]:
            statuses.append({"name": container["name"], "image": container.get("image", ""), "imageID": "",
                             "ready": False, "started": False, "restartCount": 0, "state": {"terminated": {
                                 "exitCode": 137, "reason": "Error", "finishedAt": now,
                                 "message": "the node agent restarted while the container ran; it was stopped"}}})
        self.api.merge_patch("Pod", meta["name"], {"status": {"phase": "Failed", "containerStatuses": statuses}},
                             meta["namespace"], "status")
        if meta.get("deletionTimestamp"):
            self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                             {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})

    def stop_all(self) -> None:
        """The agent is stopping: its processes go with it (SIGTERM, then SIGKILL after 5 s)."""
        with self.runs_lock:
            runs = list(self.runs.values())
        for run in runs:
            run.stopping.set()
            with run.lock:
                pids = [p.pid for p in run.processes.values()]
            for pid in pids:
                kill_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for run in runs:
            run.finished.wait(timeout=max(0.0, deadline - time.monotonic()))
        for run in runs:
            run.kill_now()

    def apply_logs(self, pod: dict[str, Any], entries: list[dict[str, Any]]) -> None:
        meta = pod["metadata"]
        self.api.apply({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}],
            },
            "spec": {"logs": entries},
        }, FIELD_MANAGER)

    # ---- canned logs --------------------------------------------------------------------------------

    def canned_pod_ended(self, pod: dict[str, Any]) -> None:
        """kwok's stages finished a canned pod: its logs are complete, a follow may end there."""
        pod_dir = self.pod_dir(pod)
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            log_file = pod_dir / container["name"] / "0.log"
            if log_file.exists():
                mark_exited(log_file)

    def canned_lines(self, annotations: dict[str, str], container: str) -> list[str]:
        if annotations.get(FAIL_ANNOTATION) == "image-pull":
            return []  # the container never ran
        name = annotations.get(f"{CANNED_LOG_ANNOTATION}-{container}") or annotations.get(CANNED_LOG_ANNOTATION)
        if not name:
            name = FAILURE_CANNED_LOG if FAIL_ANNOTATION in annotations else self.default_canned_log
        if not CANNED_LOG_NAME.match(name):
            return [f"kwok node agent: invalid canned log name {name!r}"]
        path = self.canned_logs_dir / f"{name}.log"
        try:
            return path.read_text(errors="replace").splitlines()
        except OSError:
            return [f"kwok node agent: no canned log {name!r} (looked for {path})"]

    def pod_dir(self, pod: dict[str, Any]) -> Path:
        """The kubelet's layout: <namespace>_<name>_<uid>/<container>/0.log."""
        meta = pod["metadata"]
        return self.pod_logs_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def forget(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self.runs_lock:
            run = self.runs.pop(uid, None)
        if run is not None:
            run.kill_now()  # gone from the API without a graceful stop (forced deletion)
            run.finished.wait(timeout=10)
        self.handled_uids.discard(uid)
        shutil.rmtree(self.pod_dir(pod), ignore_errors=True)
        shutil.rmtree(self.scratch_root / self.pod_dir(pod).name, ignore_errors=True)
        self.release_ports()

    def release_ports(self) -> None:
        with self.runs_lock:
            live = {(r.namespace, r.ctx.names.subdomain) for r in self.runs.values()}
            live |= {(r.namespace, s) for r in self.runs.values() for s in r.ctx.names.services}
        self.ports.release_namespace_except(live)

    def forget_missing(self, live_uids: set[str]) -> None:
        """Removes the files of pods deleted while the agent was not watching."""
        self.handled_uids &= live_uids
        for root in (self.pod_logs_dir, self.scratch_root):
            for pod_dir in root.glob("*_*_*"):
                if pod_dir.name.rsplit("_", 1)[-1] not in live_uids:
                    shutil.rmtree(pod_dir, ignore_errors=True)


def log(message: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} node-agent: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="node_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="API server URL")
    parser.add_argument("--state-dir", type=Path, required=True, help="the local cluster's state folder")
    parser.add_argument("--canned-logs-dir", type=Path, required=True)
    parser.add_argument("--default-canned-log", default="bert-mpirun-32ranks")
    args = parser.parse_args(argv)
    pki = Pki(args.state_dir / "pki")
    api = ApiClient(args.server, pki.ca_cert, pki.client_cert("node-agent"), pki.client_key("node-agent"))
    agent = NodeAgent(api, args.state_dir / "pod-logs", args.canned_logs_dir, args.default_canned_log)
    def on_signal(signum: int, _frame: Any) -> None:
        log(f"signal {signum}: stopping the pods' processes")
        agent.stop_all()
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log(f"watching pods on {args.server}; real execution with {agent.venv_bin}")
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
