"""The NVIDIA device plugin's GPU sharing, played on kwok's GPU nodes (static capacity otherwise).

What a real plugin (NVIDIA/k8s-device-plugin v0.17.2) does, and how it is stood in for here:
- Advertising: a plugin whose config file (env CONFIG_FILE, from a mounted ConfigMap) says
  `sharing: {timeSlicing|mps: {resources: [{name: nvidia.com/gpu, replicas: N}]}}` advertises each
  GPU N times. Here: while a device plugin DaemonSet (image `.../k8s-device-plugin`, no command or
  `nvidia-device-plugin`) carries such a config, every kwok GPU node's capacity and allocatable
  nvidia.com/gpu is set to its shape's GPUs x N; with the stock plugin (no config), or none, back
  to its shape's GPUs. A node labelled `kubetest2-training.local/gpu-sharing=off` keeps its shape's
  GPUs whatever the plugin says (fault injection: a node whose plugin does not share). With
  `sharing.mps` the real plugin waits for the MPS control daemon before it advertises anything:
  here, without a DaemonSet running `mps-control-daemon`, nothing is shared.
- Allocation: kubelet hands each container one of the node's GPU replicas. Here the agent gives a
  canned pod that asks for nvidia.com/gpu the lowest free replica slot of its node (slot s is GPU
  s // N) and writes that GPU's UUID where its canned log says `{gpu_uuid}`; the slot is free
  again when the pod ends or goes.
- Compute mode: the MPS control daemon sets its GPUs EXCLUSIVE_PROCESS. Here `{compute_mode}` in a
  canned log is `Exclusive_Process` while a DaemonSet runs `mps-control-daemon`, else `Default`
  (the compute-mode reset the harness runs afterwards is a canned pod and changes nothing here).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

import yaml

from localcluster.control.api import ApiClient, ApiError
from localcluster.emulation.nodes import GPU_RESOURCE, MANAGED_LABEL, SHAPES
from localcluster.hostnodes.pod_status import agent_log

PLUGIN_IMAGE = "k8s-device-plugin"
PLUGIN_COMMAND = "nvidia-device-plugin"
MPS_DAEMON_COMMAND = "mps-control-daemon"
EXCLUSIVE_PROCESS, DEFAULT_MODE = "Exclusive_Process", "Default"
PLACEHOLDERS = ("{gpu_uuid}", "{compute_mode}")
# Fault injection: a node so labelled advertises its physical GPUs only, shared or not.
SHARING_OFF_LABEL = "kubetest2-training.local/gpu-sharing"


@dataclass(frozen=True)
class Sharing:
    """What the device plugin DaemonSets say: how many times each GPU is advertised, and whether an
    MPS control daemon runs."""

    replicas: int = 1
    mode: str | None = None  # timeSlicing, mps or None
    mps_daemon: bool = False


def containers(daemonset: dict[str, Any]) -> list[dict[str, Any]]:
    spec = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def is_plugin(container: dict[str, Any]) -> bool:
    command = container.get("command") or [PLUGIN_COMMAND]
    return PLUGIN_IMAGE in str(container.get("image", "")) and command[0] == PLUGIN_COMMAND


def runs_mps_daemon(daemonset: dict[str, Any]) -> bool:
    return any((c.get("command") or [""])[0] == MPS_DAEMON_COMMAND for c in containers(daemonset))


def config_source(daemonset: dict[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, ConfigMap, key) of the plugin container's CONFIG_FILE, if it has one from a ConfigMap."""
    spec = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for container in spec.get("containers") or []:
        if not is_plugin(container):
            continue
        path = next((e.get("value") for e in container.get("env") or [] if e.get("name") == "CONFIG_FILE"), None)
        for mount in container.get("volumeMounts") or []:
            prefix = mount["mountPath"].rstrip("/") + "/"
            volume = volumes.get(mount["name"], {})
            if path and path.startswith(prefix) and "configMap" in volume:
                return daemonset["metadata"]["namespace"], volume["configMap"]["name"], path[len(prefix):]
    return None


def replicas_of(config_text: str) -> tuple[str | None, int]:
    """(sharing mode, replicas of nvidia.com/gpu) a plugin config file says; (None, 1) when none."""
    config = yaml.safe_load(config_text) or {}
    sharing = config.get("sharing") or {}
    for mode in ("timeSlicing", "mps"):
        for resource in (sharing.get(mode) or {}).get("resources") or []:
            if resource.get("name") == GPU_RESOURCE and int(resource.get("replicas", 1)) > 1:
                return mode, int(resource["replicas"])
    return None, 1


def gpu_uuid(node: str, gpu: int) -> str:
    """A stable UUID for GPU `gpu` of a kwok node, in nvidia-smi's shape."""
    digest = hashlib.sha256(node.encode()).hexdigest()
    return f"GPU-{gpu:08x}-{digest[:4]}-{digest[4:8]}-{digest[8:12]}-{digest[12:24]}"


class GpuSharing:
    """Follows the device plugin DaemonSets into the nodes' advertised GPUs, and hands out GPU replicas."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.lock = threading.Lock()
        self.sharing = Sharing()
        # node -> pod uid -> slot
        self.slots: dict[str, dict[str, int]] = {}
        # DaemonSet uid -> (deleted, generation, being deleted) last refreshed for.
        self.generations: dict[str, tuple[bool, int | None, bool]] = {}

    # ---- the DaemonSets (an informer's callbacks) -----------------------------------------------

    def on_list(self, _daemonsets: list[dict[str, Any]]) -> None:
        self.refresh()

    def on_event(self, event_type: str, daemonset: dict[str, Any]) -> None:
        """Only a device plugin's or MPS daemon's DaemonSet, and only when its spec changed (a new
        generation), it is deleted or being deleted: their status changes with every pod (a
        thousand-node roll-out is thousands of events), and each refresh lists the nodes."""
        if not (any(is_plugin(c) for c in containers(daemonset)) or runs_mps_daemon(daemonset)):
            return
        meta = daemonset["metadata"]
        seen = (event_type == "DELETED", meta.get("generation"), bool(meta.get("deletionTimestamp")))
        with self.lock:
            if self.generations.get(meta["uid"]) == seen:
                return
            self.generations[meta["uid"]] = seen
        self.refresh()

    def read_sharing(self) -> Sharing:
        daemonsets = self.api.get("DaemonSet")["items"]
        mps_daemon = any(runs_mps_daemon(ds) for ds in daemonsets if not ds["metadata"].get("deletionTimestamp"))
        for ds in daemonsets:
            source = config_source(ds)
            if source is None or ds["metadata"].get("deletionTimestamp"):
                continue
            config_map = self.api.get_or_none("ConfigMap", source[1], source[0])
            text = ((config_map or {}).get("data") or {}).get(source[2], "")
            mode, replicas = replicas_of(text)
            if mode == "mps" and not mps_daemon:
                agent_log(f"device plugin {ds['metadata']['name']}: MPS sharing without an MPS control daemon: "
                          "nothing shared (the plugin waits for the daemon)")
                return Sharing(1, mode, False)
            return Sharing(replicas, mode, mps_daemon)
        return Sharing(1, None, mps_daemon)

    def refresh(self) -> None:
        try:
            sharing = self.read_sharing()
        except (ApiError, OSError, ValueError, yaml.YAMLError) as error:
            agent_log(f"GPU sharing: reading the device plugin: {error}")
            return
        with self.lock:
            changed, self.sharing = sharing != self.sharing, sharing
        if changed:
            agent_log(f"GPU sharing: {sharing.mode or 'none'}, each GPU advertised {sharing.replicas} time(s)"
                      + (", MPS control daemon running" if sharing.mps_daemon else ""))
        self.advertise(sharing.replicas)

    def advertise(self, replicas: int) -> None:
        """Every kwok GPU node's nvidia.com/gpu: its shape's GPUs x replicas."""
        for node in self.api.get("Node", labelSelector=MANAGED_LABEL)["items"]:
            labels = node["metadata"].get("labels") or {}
            shape = SHAPES.get(labels.get(MANAGED_LABEL, ""))
            if shape is None or not shape.gpus:
                continue
            want = str(shape.gpus * (1 if labels.get(SHARING_OFF_LABEL) == "off" else replicas))
            status = node.get("status") or {}
            if (status.get("allocatable") or {}).get(GPU_RESOURCE) == want == (status.get("capacity") or {}).get(
                    GPU_RESOURCE):
                continue
            patch = {"status": {"capacity": {GPU_RESOURCE: want}, "allocatable": {GPU_RESOURCE: want}}}
            try:
                self.api.merge_patch("Node", node["metadata"]["name"], patch, subresource="status")
            except ApiError as error:
                agent_log(f"GPU sharing: node {node['metadata']['name']}: {error}")

    # ---- the pods' GPUs -------------------------------------------------------------------------

    def substitutions(self, pod: dict[str, Any]) -> dict[str, str]:
        """What `{gpu_uuid}` and `{compute_mode}` stand for in this pod's canned log."""
        with self.lock:
            sharing = self.sharing
        out = {"{compute_mode}": EXCLUSIVE_PROCESS if sharing.mps_daemon else DEFAULT_MODE}
        uuid = self.assign(pod, sharing.replicas)
        if uuid is not None:
            out["{gpu_uuid}"] = uuid
        return out

    def assign(self, pod: dict[str, Any], replicas: int) -> str | None:
        """The UUID of the GPU whose lowest free replica the pod gets; None for a pod asking for none."""
        node = pod["spec"].get("nodeName", "")
        asks = any((c.get("resources") or {}).get("limits", {}).get(GPU_RESOURCE) for c in pod["spec"]["containers"])
        if not asks:
            return None
        uid = pod["metadata"]["uid"]
        with self.lock:
            taken = self.slots.setdefault(node, {})
            if uid not in taken:
                used = set(taken.values())
                taken[uid] = next(slot for slot in range(len(used) + 1) if slot not in used)
            return gpu_uuid(node, taken[uid] // replicas)

    def release(self, uid: str) -> None:
        with self.lock:
            for taken in self.slots.values():
                taken.pop(uid, None)
