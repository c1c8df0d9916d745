"""Where a pod's files live on this machine, and the kwok `Logs` object that serves its logs.

Container logs follow the kubelet's layout, `<pod-logs>/<namespace>_<name>_<uid>/<container>/0.log`;
a pod run for real also has a scratch folder of the same name under `<pod-scratch>` (its cwd,
/tmp and volumes). kwok serves `pods/log` from files named by a `Logs` object of the pod's name and
namespace (its ClusterLogs select pods by name and namespace only, not by annotation), applied
owned by the pod so that the garbage collector removes it with the pod.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.control.api import ApiClient

FIELD_MANAGER = "kubetest2-training-node-agent"


@dataclass(frozen=True)
class PodFiles:
    """The agent's folders for every pod."""

    logs_root: Path
    scratch_root: Path

    @staticmethod
    def folder_name(pod: dict[str, Any]) -> str:
        meta = pod["metadata"]
        return f"{meta['namespace']}_{meta['name']}_{meta['uid']}"

    def logs_dir(self, pod: dict[str, Any]) -> Path:
        return self.logs_root / self.folder_name(pod)

    def scratch_dir(self, pod: dict[str, Any]) -> Path:
        return self.scratch_root / self.folder_name(pod)

    def remove(self, pod: dict[str, Any]) -> None:
        shutil.rmtree(self.logs_dir(pod), ignore_errors=True)
        shutil.rmtree(self.scratch_dir(pod), ignore_errors=True)

    def remove_missing(self, live_uids: set[str]) -> None:
        """Removes the files of pods deleted while the agent was not watching."""
        for root in (self.logs_root, self.scratch_root):
            for pod_dir in root.glob("*_*_*"):
                if pod_dir.name.rsplit("_", 1)[-1] not in live_uids:
                    shutil.rmtree(pod_dir, ignore_errors=True)


def apply_logs(api: ApiClient, pod: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """The pod's `Logs` object: which file kwok serves for each container."""
    meta = pod["metadata"]
    api.apply({
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Logs",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}],
        },
        "spec": {"logs": entries},
    }, FIELD_MANAGER)


def all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
