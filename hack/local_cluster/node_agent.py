"""The node agent: plays the kubelet's container-log side for kwok's nodes.

kwok serves `pods/log` from files named by a `Logs` object of the pod's name and namespace (its
ClusterLogs select pods by name and namespace only, not by annotation). This agent watches pods;
for each pod bound to a node it writes every container's log file in CRI format and applies the
pod's `Logs` object, owned by the pod so that the garbage collector removes it with the pod.

Today the lines are canned: `kubetest2-training.local/canned-log: <name>` on the pod (or
`kubetest2-training.local/canned-log-<container>` for one container) selects
`hack/canned-logs/<name>.log`. Running the pod's command as a local process (a later issue) is this
agent's job too: it would write the process's output to the same files.

Run by `hack/local-cluster up` as `python -m local_cluster.node_agent`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from .api import ApiClient, ApiError
from .pki import Pki

ANNOTATION_PREFIX = "kubetest2-training.local/"
CANNED_LOG_ANNOTATION = ANNOTATION_PREFIX + "canned-log"
FAIL_ANNOTATION = ANNOTATION_PREFIX + "fail"
LOGS_READY_ANNOTATION = ANNOTATION_PREFIX + "logs-ready"
FIELD_MANAGER = "kubetest2-training-node-agent"
# The canned log of a pod whose failure is injected, unless the pod names one.
FAILURE_CANNED_LOG = "bert-mpirun-missing-env"
# An annotation value becomes a file name: no path separators, no dot-dot.
CANNED_LOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def cri_lines(lines: list[str], start: datetime) -> str:
    """Plain lines -> the CRI log format kwok reads: `<RFC3339Nano> stdout F <line>`."""
    out = []
    for index, line in enumerate(lines):
        stamp = (start + timedelta(microseconds=index)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
        out.append(f"{stamp} stdout F {line}\n")
    return "".join(out)


class NodeAgent:
    """Gives every scheduled pod its container logs (see the module docstring)."""

    def __init__(self, api: ApiClient, pod_logs_dir: Path, canned_logs_dir: Path, default_canned_log: str) -> None:
        self.api = api
        self.pod_logs_dir = pod_logs_dir
        self.canned_logs_dir = canned_logs_dir
        self.default_canned_log = default_canned_log
        self.handled_uids: set[str] = set()

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
        if meta["uid"] in self.handled_uids or not pod["spec"].get("nodeName"):
            return
        if meta.get("deletionTimestamp"):
            return  # deleted before it ever ran: nothing will ask for its logs
        annotations = meta.get("annotations") or {}
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
                # The crashed run's output, served for `kubectl logs --previous`.
                (container_dir / "previous.log").write_text(content)
                entry["previousLogsFile"] = str(container_dir / "previous.log")
            entries.append(entry)
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
        # kwok starts a pod only once it carries this annotation (stage pod-ready), as a kubelet
        # starts containers only once it can log them: pods/log never misses a running container.
        if annotations.get(LOGS_READY_ANNOTATION) != "true":
            self.api.merge_patch("Pod", meta["name"], {"metadata": {"annotations": {LOGS_READY_ANNOTATION: "true"}}},
                                 meta["namespace"])
        self.handled_uids.add(meta["uid"])

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
        self.handled_uids.discard(pod["metadata"]["uid"])
        shutil.rmtree(self.pod_dir(pod), ignore_errors=True)

    def forget_missing(self, live_uids: set[str]) -> None:
        """Removes the files of pods deleted while the agent was not watching."""
        self.handled_uids &= live_uids
        for pod_dir in self.pod_logs_dir.glob("*_*_*"):
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
    log(f"watching pods on {args.server}")
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
