"""GPU sharing set up and undone (TestTimeSlicing, TestMps): the NVIDIA device plugin this run
installed is replaced, under the same name, by one whose config file shares each GPU `replicas`
times (time-slicing, or MPS with its control daemon); afterwards everything is put back as it was.

Why replace rather than add: the stock DaemonSet (manifests/addons/nvidia-device-plugin.yaml) has
no config volume, and two plugins advertising nvidia.com/gpu on a node would conflict. A plugin
already present under that name (not installed by this run) is replaced too, as upstream's
(`deleteDaemonSetAndWait` of whatever is there); upstream then puts its stock plugin back, here the
one that was there comes back as it was (its spec, labels and annotations).

The config file is the plugin's own format (NVIDIA/k8s-device-plugin v0.17.2, api/config/v1):
`version: v1` and `sharing: {timeSlicing|mps: {resources: [{name: nvidia.com/gpu, replicas: N}]}}`,
passed as CONFIG_FILE from a ConfigMap. MPS adds the chart's MPS_ROOT (/run/nvidia/mps) and its
mounts to the plugin, and the control daemon (manifests/addons/nvidia-mps-control-daemon.yaml).

Restoration (GpuSharing.restore), in this order: the workload drained (its pods gone), the MPS
control daemon removed, every node's compute mode reset (`nvidia-smi -c DEFAULT` in a Job per
node: the daemon leaves its GPUs EXCLUSIVE_PROCESS), the sharing plugin and its ConfigMap deleted,
the stock plugin (or the one that was present) created again and rolled out. It runs once, from
whichever comes first of the test's cleanup and the run's teardown (both registered), on the run's
cluster and without the test's cancel token, so a failed, timed-out or interrupted test is
restored too; each step's failure is said and the next steps still run.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.cluster.client import Cluster
from harness.cluster.conditions import deleted, pods_ready_on_nodes, pods_succeeded
from harness.cluster.labels import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, RUN_ID_LABEL, label_value
from harness.cluster.manifests import template_text
from harness.cluster.resources import NODE, POD, Obj
from harness.cluster.wait import Condition, wait_for
from harness.cluster.watch import ClusterState, Watched
from harness.config.topology import DEFAULT_TOLERATIONS, GPU_RESOURCE
from harness.errors import HarnessError, TestFailure
from harness.framework.context import RunContext
from harness.setup.addons import (
    ADDON_RIGHTS_FILE,
    NVIDIA_DEVICE_PLUGIN,
    addon_objects,
    describe,
    require_rights,
    say,
)

PLUGIN_NAMESPACE = "kube-system"
PLUGIN_NAME = "nvidia-device-plugin-daemonset"
PLUGIN_SELECTOR = "name=nvidia-device-plugin-ds"
CONFIG_MAP = "nvidia-device-plugin-sharing"
CONFIG_KEY = "config.yaml"
CONFIG_MOUNT = "/config"
MPS_DAEMON_DS = "nvidia-device-plugin-mps-control-daemon"
MPS_DAEMON_MANIFEST = "addons/nvidia-mps-control-daemon.yaml"
MPS_DAEMON_SELECTOR = "name=nvidia-device-plugin-mps-control-daemon"
# The chart's mps.root (deployments/helm/nvidia-device-plugin/values.yaml, v0.17.2).
MPS_ROOT = "/run/nvidia/mps"
# The job label of the compute-mode reset pods (a canned log set names its log after it).
RESET_JOB = "gpu-compute-mode-reset"
# How long each restoration step may take before the next one runs anyway.
STEP_SECONDS = 120.0


@dataclass(frozen=True)
class SharingMode:
    """A way of sharing: its test's name for it and its key in the plugin's `sharing` section."""

    name: str
    config_key: str

    @property
    def mps(self) -> bool:
        return self.config_key == "mps"


TIME_SLICING = SharingMode("time-slicing", "timeSlicing")
MPS = SharingMode("mps", "mps")


def sharing_config(mode: SharingMode, replicas: int) -> str:
    """The device plugin's config file sharing every nvidia.com/gpu `replicas` times."""
    return (f"version: v1\nsharing:\n  {mode.config_key}:\n    resources:\n"
            f"    - name: {GPU_RESOURCE}\n      replicas: {replicas}\n")


def _labelled(obj: Obj, run_id: str) -> Obj:
    obj["metadata"].setdefault("labels", {}).update({MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: label_value(run_id)})
    return obj


def stock_plugin(run_id: str, extra_tolerations: Sequence[Mapping[str, str]]) -> Obj:
    """The stock device plugin DaemonSet, exactly as addons.ensure creates it."""
    (plugin,) = addon_objects(NVIDIA_DEVICE_PLUGIN, run_id, extra_tolerations)
    return plugin


def sharing_objects(mode: SharingMode, replicas: int, run_id: str, extra_tolerations: Sequence[Mapping[str, str]],
                    pod_annotations: Mapping[str, str]) -> list[Obj]:
    """What sharing is made of, in creation order: the ConfigMap, (MPS) the control daemon, and the
    plugin: the stock DaemonSet under its own name with the config file (and MPS' mounts) added.
    The control daemon's pods carry POD_ANNOTATIONS like the test's own pods (they run for it)."""
    config_map = _labelled({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": CONFIG_MAP, "namespace": PLUGIN_NAMESPACE},
                            "data": {CONFIG_KEY: sharing_config(mode, replicas)}}, run_id)
    plugin = stock_plugin(run_id, extra_tolerations)
    pod = plugin["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = container.setdefault("env", [])
    env.append({"name": "CONFIG_FILE", "value": f"{CONFIG_MOUNT}/{CONFIG_KEY}"})
    mounts = container.setdefault("volumeMounts", [])
    mounts.append({"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True})
    volumes = pod.setdefault("volumes", [])
    volumes.append({"name": "config", "configMap": {"name": CONFIG_MAP}})
    objects = [config_map]
    if mode.mps:
        # As the chart's plugin container (templates/daemonset-device-plugin.yml): the MPS root, and
        # the daemon's /dev/shm for its health check.
        env.append({"name": "MPS_ROOT", "value": MPS_ROOT})
        mounts += [{"name": "mps-shm", "mountPath": "/dev/shm"}, {"name": "mps-root", "mountPath": "/mps"}]
        volumes += [{"name": "mps-root", "hostPath": {"path": MPS_ROOT, "type": "DirectoryOrCreate"}},
                    {"name": "mps-shm", "hostPath": {"path": f"{MPS_ROOT}/shm"}}]
        objects.append(mps_daemon(run_id, extra_tolerations, pod_annotations))
    return [*objects, plugin]


def mps_daemon(run_id: str, extra_tolerations: Sequence[Mapping[str, str]],
               pod_annotations: Mapping[str, str]) -> Obj:
    """The pinned MPS control daemon DaemonSet, labelled and tolerating what the plugin does."""
    import yaml  # not at import: see harness/cluster/manifests.py

    (daemon,) = [doc for doc in yaml.safe_load_all(template_text(MPS_DAEMON_MANIFEST)) if doc]
    template = daemon["spec"]["template"]
    tolerations = template["spec"].setdefault("tolerations", [])
    tolerations += [dict(t) for t in (*DEFAULT_TOLERATIONS, *extra_tolerations) if dict(t) not in tolerations]
    if pod_annotations:
        template["metadata"].setdefault("annotations", {}).update(pod_annotations)
    return _labelled(daemon, run_id)


def reset_job(node: str, run_id: str, image: str, extra_tolerations: Sequence[Mapping[str, str]],
              pod_annotations: Mapping[str, str]) -> Obj:
    """A Job resetting every GPU of `node` to compute mode DEFAULT (`nvidia-smi -c DEFAULT`:
    privileged, every GPU visible, no GPU requested: the plugin may be gone by then)."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: label_value(run_id), JOB_LABEL: RESET_JOB}
    tolerations = [dict(t) for t in (*DEFAULT_TOLERATIONS, *extra_tolerations)]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{RESET_JOB}-{node}"[:63].rstrip("-."), "namespace": PLUGIN_NAMESPACE,
                         "labels": labels},
            "spec": {"backoffLimit": 2, "ttlSecondsAfterFinished": 600, "template": {
                "metadata": {"labels": labels, "annotations": dict(pod_annotations)},
                "spec": {"nodeName": node, "restartPolicy": "Never", "tolerations": tolerations,
                         "automountServiceAccountToken": False,
                         "containers": [{"name": "reset", "image": image, "imagePullPolicy": "IfNotPresent",
                                         "command": ["nvidia-smi", "-c", "DEFAULT"],
                                         "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                                         "securityContext": {"privileged": True}}]}}}}


# What the API server sets on a DaemonSet it stores: dropped from a present plugin before it is
# created again (its generation annotation would be stale).
SERVER_SET_ANNOTATIONS = ("deprecated.daemonset.template.generation",)


def recreatable(live: Obj) -> Obj:
    """A live DaemonSet as it can be created again: its name, namespace, labels, annotations and spec."""
    meta = live["metadata"]
    annotations = {key: value for key, value in (meta.get("annotations") or {}).items()
                   if key not in SERVER_SET_ANNOTATIONS}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": dict(meta.get("labels") or {}),
                         "annotations": annotations},
            "spec": copy.deepcopy(live["spec"])}


def pod_selector(daemonset: Obj) -> str:
    """The DaemonSet's pods, as a label selector."""
    return ",".join(f"{key}={value}" for key, value in daemonset["spec"]["selector"]["matchLabels"].items())


def advertised(nodes: Sequence[Obj]) -> dict[str, int]:
    """Each node's allocatable nvidia.com/gpu (0 when it advertises none)."""
    return {node["metadata"]["name"]: int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
            for node in nodes}


def nodes_advertise(expected: Mapping[str, int]) -> Condition:
    """Every named node's allocatable nvidia.com/gpu is its expected count."""

    def check(state: ClusterState, _now: float) -> str | None:
        seen = advertised([n for n in state.of_kind("Node") if n["metadata"]["name"] in expected])
        return "nodes advertise " + ", ".join(f"{k}={v}" for k, v in sorted(seen.items())) \
            if all(seen.get(name) == count for name, count in expected.items()) else None

    wanted = ", ".join(f"{name}: {count}" for name, count in sorted(expected.items()))
    return Condition(f"allocatable {GPU_RESOURCE} {wanted}", (Watched(NODE),), check)


def no_pods(namespace: str, selector: str) -> Condition:
    """No pod of the selection is left (a deleted owner's pods are gone, not only terminating)."""

    def check(state: ClusterState, _now: float) -> str | None:
        left = [p for p in state.of_kind("Pod") if p["metadata"].get("namespace") == namespace]
        return f"no pod ({selector}) left" if state.listed("Pod") and not left else None

    return Condition(f"no pod ({selector}) left in {namespace}", (Watched(POD, namespace, selector),), check)


@dataclass
class GpuSharing:
    """One test's sharing: `share()` replaces the plugin; `restore()` puts it back (once)."""

    session: RunContext
    mode: SharingMode
    replicas: int
    node_names: tuple[str, ...]
    # Each node's GPU count before sharing: what it must advertise again once restored.
    physical: Mapping[str, int] = field(default_factory=dict)
    # (namespace, label selector) of the workload's pods, drained first on restoration.
    workload: tuple[str, str] | None = None
    steps: list[str] = field(default_factory=list)
    # Set just before share() changes anything: until then there is nothing to restore.
    changed: bool = False
    # The plugin that was present before the run (not installed by it), put back instead of the stock one.
    present: Obj | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _restored: bool = False

    @property
    def cluster(self) -> Cluster:
        assert self.session.cluster is not None, "GPU sharing needs a connected cluster"
        return self.session.cluster

    def _objects(self) -> list[Obj]:
        cfg = self.session.cfg
        return sharing_objects(self.mode, self.replicas, cfg.run_id, cfg.tolerations.as_pod_spec(),
                               cfg.pod_annotations)

    def _say(self, message: str) -> None:
        """Cluster-wide changes are always said, as the add-ons' are."""
        say(self.session, f"GPU sharing: {message}")

    def _wait(self, condition: Condition, timeout: float) -> str:
        return wait_for(self.cluster, condition, timeout=timeout)

    def _delete(self, obj: Obj) -> None:
        """Delete one object and wait (bounded) until it is gone."""
        meta, resource = obj["metadata"], self.cluster.resource(obj["apiVersion"], obj["kind"])
        self.cluster.delete(resource, meta["name"], meta.get("namespace"))
        self._wait(deleted(resource, meta["name"], meta.get("namespace")), STEP_SECONDS)

    def share(self) -> None:
        """Replace the stock plugin by the sharing one (and MPS' daemon) and wait for them on the
        nodes. The restoration is registered on the run's teardown before anything changes."""
        session, cfg = self.session, self.session.cfg
        stock = stock_plugin(cfg.run_id, cfg.tolerations.as_pod_spec())
        installed = session.properties.get(f"addon.{NVIDIA_DEVICE_PLUGIN.key}", "")
        if not installed.startswith("installed"):
            live = self.cluster.get(self.cluster.resource("apps/v1", "DaemonSet"), PLUGIN_NAME, PLUGIN_NAMESPACE)
            if live is None:
                raise TestFailure(f"{self.mode.name}: no NVIDIA device plugin ({describe(stock)}) to replace "
                                  f"({installed or 'not installed by this run'})")
            self.present = recreatable(live)
        objects = self._objects()
        resets = [reset_job(node, cfg.run_id, cfg.nccl_tests_image, (), {}) for node in self.node_names[:1]]
        require_rights(self.cluster, f"{self.mode.name} (replacing {describe(stock)})", [*objects, *resets],
                       f"apply {ADDON_RIGHTS_FILE} (docs/RBAC.md)")
        session.teardown.callback(self.restore)
        self._say(f"replacing {describe(stock)}{' (present before the run)' if self.present else ''} by one "
                  f"sharing each GPU {self.replicas} times ({self.mode.name})")
        self.changed = True
        self._delete(stock)
        self._wait(no_pods(PLUGIN_NAMESPACE, pod_selector(self.present or stock)), STEP_SECONDS)
        for obj in objects:
            self.cluster.apply(obj)
        self.steps.append("shared")
        self._say("created " + ", ".join(describe(o) for o in objects))
        for selector in ([MPS_DAEMON_SELECTOR] if self.mode.mps else []) + [PLUGIN_SELECTOR]:
            self._wait(pods_ready_on_nodes(PLUGIN_NAMESPACE, selector, self.node_names), cfg.discovery_timeout)

    def restore(self) -> None:
        """Put back what share() changed, once, each step guarded (see the module docstring)."""
        with self._lock:
            if self._restored or not self.changed:
                return
            self._restored = True
        failures: list[str] = []

        def step(what: str, action: Callable[[], None]) -> None:
            try:
                action()
                self.steps.append(what)
            except (HarnessError, TestFailure) as exc:
                failures.append(f"{what}: {exc}")
                self._say(f"restoring: {what} failed, going on: {exc}")

        objects = {obj["kind"] + "/" + obj["metadata"]["name"]: obj for obj in self._objects()}
        if self.workload is not None:
            step("workload drained", lambda: self._wait(no_pods(*self.workload), STEP_SECONDS))
        if self.mode.mps:
            step("MPS control daemon removed", lambda: self._delete(objects[f"DaemonSet/{MPS_DAEMON_DS}"]))
            step("compute mode reset", self._reset_compute_mode)
        step("sharing plugin removed", lambda: (self._delete(objects[f"DaemonSet/{PLUGIN_NAME}"]),
                                                self._wait(no_pods(PLUGIN_NAMESPACE, PLUGIN_SELECTOR), STEP_SECONDS)))
        step("sharing config removed", lambda: self._delete(objects[f"ConfigMap/{CONFIG_MAP}"]))
        step("present plugin restored" if self.present else "stock plugin restored", self._restore_stock)
        outcome = "restored" if not failures else "restore failed: " + "; ".join(failures)
        self.session.properties[f"gpu_sharing.{self.mode.name}"] = outcome
        self._say(outcome if failures else f"{'present' if self.present else 'stock'} device plugin restored "
                  f"({', '.join(self.steps)})")

    def _reset_compute_mode(self) -> None:
        cfg = self.session.cfg
        jobs = [reset_job(node, cfg.run_id, cfg.nccl_tests_image, cfg.tolerations.as_pod_spec(), cfg.pod_annotations)
                for node in self.node_names]
        for job in jobs:
            self.cluster.apply(job)
        try:
            self._wait(pods_succeeded(PLUGIN_NAMESPACE, f"{JOB_LABEL}={RESET_JOB}", len(jobs)), STEP_SECONDS)
        finally:
            for job in jobs:
                self._delete(job)

    def _restore_stock(self) -> None:
        cfg = self.session.cfg
        plugin = self.present or stock_plugin(cfg.run_id, cfg.tolerations.as_pod_spec())
        self.cluster.apply(copy.deepcopy(plugin))
        self._wait(pods_ready_on_nodes(PLUGIN_NAMESPACE, pod_selector(plugin), self.node_names), cfg.discovery_timeout)
        if self.physical:
            self._wait(nodes_advertise(self.physical), cfg.discovery_timeout)
