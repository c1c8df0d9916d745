"""Cluster add-ons a run installs like upstream's TestMain does: the NVIDIA device plugin
(--installDevicePlugin, default true), the EFA device plugin (--efaEnabled=true), mpi-operator
(when a test needs MPIJobs and the cluster lacks the CRD), Kubeflow Trainer and JobSet (when a test
needs TrainJobs and the cluster lacks the CRD) and the torch-distributed ClusterTrainingRuntime
(harness/setup/trainer.py).

Each comes from a pinned manifest shipped in manifests/addons/ (version and source in its header).
Only the objects the cluster lacks are created; every object of the add-on is then waited for,
failing fast (a DaemonSet: a Ready pod on each selected node; a Deployment: Available; a CRD:
Established; their pods failing, crash-looping or not pulling fail at once); what this run created,
and only that, is deleted after the last test. Unlike upstream, an add-on already present is
neither re-applied nor removed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.cluster.client import Cluster
from harness.cluster.conditions import (
    any_pod_failed,
    crd_established,
    deleted,
    deployment_available,
    pods_ready_on_nodes,
)
from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL, RUN_ID_LABEL, label_value
from harness.cluster.manifests import template_text
from harness.cluster.resources import Obj
from harness.cluster.wait import Condition, wait_for
from harness.config.topology import DEFAULT_TOLERATIONS, EFA_RESOURCE, GPU_RESOURCE, KWOK_NODE_ANNOTATION
from harness.errors import ConfigError, HarnessError, TestFailure, WaitTimeout
from harness.framework.context import RunContext

# Where the device plugins (and GPU sharing's objects) live, and the check manifests/rbac.yaml's
# admission policy makes before the suites' ServiceAccount may change anything there: granted by
# manifests/rbac-addons.yaml (verb, API group, resource), docs/RBAC.md.
ADDON_NAMESPACE = "kube-system"
ADDON_RIGHTS = ("install", "kubetest2-training", "addons")
ADDON_RIGHTS_FILE = "manifests/rbac-addons.yaml"

# How long removal waits for each deleted object to be gone before leaving it to the API server.
REMOVE_SECONDS = 60.0


@dataclass(frozen=True)
class Addon:
    """An add-on: its name, pinned version and manifest (manifests/addons/<key>.yaml)."""

    name: str
    key: str
    version: str

    @property
    def manifest(self) -> str:
        return f"addons/{self.key}.yaml"


NVIDIA_DEVICE_PLUGIN = Addon("NVIDIA device plugin", "nvidia-device-plugin", "v0.17.2")
EFA_DEVICE_PLUGIN = Addon("EFA device plugin", "efa-device-plugin", "v0.5.8")
MPI_OPERATOR = Addon("mpi-operator", "mpi-operator", "v0.7.0")
# LAUNCHER=trainjob (harness/setup/trainer.py): JobSet first (Trainer makes JobSets), then Trainer,
# then the runtime its TrainJobs reference (admitted by Trainer's webhook).
JOBSET = Addon("JobSet", "jobset", "v0.10.1")
TRAINER = Addon("Kubeflow Trainer", "trainer", "v2.1.0")
TORCH_RUNTIME = Addon("torch-distributed ClusterTrainingRuntime", "torch-distributed-runtime", "v2.1.0")
ADDONS = (NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN, MPI_OPERATOR, JOBSET, TRAINER, TORCH_RUNTIME)


def addon_objects(addon: Addon, run_id: str, extra_tolerations: Sequence[Mapping[str, str]] = ()) -> list[Obj]:
    """The add-on's objects, each labelled managed-by and run id (its selectors untouched); its
    DaemonSets' pods also tolerate what the suite's pods do (DEFAULT_TOLERATIONS and TOLERATIONS'):
    the pinned manifests tolerate only `nvidia.com/gpu:NoSchedule` (device plugin) and
    `aws.amazon.com/efa:NoSchedule` (EFA plugin), so an EFA-tainted GPU node got no plugin."""
    import yaml  # not at import: see harness/cluster/manifests.py

    objects = [doc for doc in yaml.safe_load_all(template_text(addon.manifest)) if doc]
    for obj in objects:
        labels = obj["metadata"].setdefault("labels", {})
        labels.update({MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: label_value(run_id)})
        if obj["kind"] == "DaemonSet":
            tolerations = obj["spec"]["template"]["spec"].setdefault("tolerations", [])
            tolerations += [dict(t) for t in (*DEFAULT_TOLERATIONS, *extra_tolerations) if dict(t) not in tolerations]
    return objects


def describe(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta['namespace']}/{meta['name']}" if meta.get("namespace") else \
        f"{obj['kind']} {meta['name']}"


def missing_rights(cluster: Cluster, objects: Sequence[Obj]) -> list[str]:
    """What this account may not do, of creating `objects` (SelfSubjectAccessReviews, before
    anything is created): each kind's create where it goes, and in kube-system the add-on rights."""
    wanted: dict[tuple[str, str, str, str], None] = {}
    for obj in objects:
        resource = cluster.resource(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace", "")
        wanted[("create", obj["apiVersion"].rpartition("/")[0], resource.plural, namespace)] = None
        if namespace == ADDON_NAMESPACE:
            wanted[(*ADDON_RIGHTS, ADDON_NAMESPACE)] = None
    return [f"{verb} {f'{group}/' if group else ''}{plural}" + (f" in {namespace}" if namespace else "")
            for verb, group, plural, namespace in wanted if not cluster.allowed(verb, group, plural, namespace or None)]


def require_rights(cluster: Cluster, what: str, objects: Sequence[Obj], remedy: str) -> None:
    """A ConfigError naming what is missing and `remedy`, unless this account may create `objects`."""
    missing = missing_rights(cluster, objects)
    if missing:
        raise ConfigError(f"{what} needs rights this account lacks ({', '.join(missing)}): {remedy}")


def install_remedy(addon: Addon, objects: Sequence[Obj]) -> str:
    """How to give a run the rights to install `addon`, or to do without them."""
    install_first = (f"or have an administrator install it first (kubectl apply --server-side -f "
                     f"manifests/{addon.manifest})")
    if all(obj["metadata"].get("namespace") == ADDON_NAMESPACE for obj in objects):
        return f"apply {ADDON_RIGHTS_FILE} (docs/RBAC.md), {install_first}"
    return f"it takes an administrator's rights (CRDs, cluster roles; docs/RBAC.md): {install_first}"


def readiness(obj: Obj, node_names: tuple[str, ...], grace: float) -> tuple[Condition, list[Condition]] | None:
    """What proves an object is up, and what fails it at once; None for objects with no state."""
    kind, meta = obj["kind"], obj["metadata"]
    if kind in ("DaemonSet", "Deployment"):
        labels = obj["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{key}={value}" for key, value in labels.items())
        fails_on = [any_pod_failed(meta["namespace"], selector, grace)]
        if kind == "DaemonSet":
            return pods_ready_on_nodes(meta["namespace"], selector, node_names), fails_on
        return deployment_available(meta["namespace"], meta["name"]), fails_on
    if kind == "CustomResourceDefinition":
        return crd_established(meta["name"]), []
    return None


def ensure(session: RunContext, addon: Addon, node_names: tuple[str, ...], objects: list[Obj] | None = None) -> None:
    """Create what the cluster lacks of the add-on (`objects`: its objects as the caller completed
    them, dranet with its image), register its removal, wait for all of it."""
    cluster, cfg = session.cluster, session.cfg
    assert cluster is not None, "ensure an add-on after connecting"
    if objects is None:
        objects = addon_objects(addon, cfg.run_id, cfg.tolerations.as_pod_spec())
    live = {describe(obj): cluster.get(cluster.resource(obj["apiVersion"], obj["kind"]), obj["metadata"]["name"],
                                       obj["metadata"].get("namespace")) for obj in objects}
    created = [obj for obj in objects if live[describe(obj)] is None]
    left = sorted({(found.get("metadata", {}).get("labels") or {}).get(RUN_ID_LABEL, "?") for found in live.values()
                   if found and (found["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY})
    if left:
        say(session, f"{addon.name}: found what kubetest2-training run(s) {', '.join(left)} installed and did not "
            "remove (interrupted?): used, not removed; `python -m harness.cleanup` removes it")
    if created:
        require_rights(cluster, f"installing {addon.name} {addon.version} (this cluster lacks "
                       + ", ".join(describe(o) for o in created) + ")", created, install_remedy(addon, created))
        session.teardown.callback(remove, session, addon, created)
        for obj in created:
            cluster.apply(obj)
        say(session, f"{addon.name} {addon.version}: created " + ", ".join(describe(o) for o in created))
    session.properties[f"addon.{addon.key}"] = (f"installed {addon.version} by this run" if created
                                                else "present before the run: not installed, not removed")
    started = time.monotonic()
    for obj in objects:
        ready = readiness(obj, node_names, cfg.pod_failure_grace)
        if ready is not None:
            try:
                wait_for(cluster, ready[0], fails_on=ready[1], timeout=cfg.discovery_timeout, cancel=session.cancel)
            except WaitTimeout as exc:
                raise WaitTimeout(f"TIMEOUT: {addon.name} {addon.version} did not come up: "
                                  + str(exc).removeprefix("TIMEOUT: ")) from None
    say(session, f"{addon.name}: ready after {time.monotonic() - started:.1f}s"
        + (f" on {', '.join(node_names)}" if node_names else ""))


def remove(session: RunContext, addon: Addon, created: list[Obj]) -> None:
    """Delete what this run created of the add-on, last first, and wait (bounded) until it is gone;
    a failure is said and the run goes on (its JUnit must still be written)."""
    try:
        _delete_and_wait(session, addon, created)
    except (HarnessError, TestFailure) as exc:
        session.properties[f"addon.{addon.key}"] = f"installed {addon.version} by this run, removal failed: {exc}"
        say(session, f"{addon.name}: removal failed, left in place: {exc}")
        return
    session.properties[f"addon.{addon.key}"] = f"installed {addon.version} by this run, removed at the end"
    say(session, f"{addon.name}: removed " + ", ".join(describe(o) for o in reversed(created)))


def _delete_and_wait(session: RunContext, addon: Addon, created: list[Obj]) -> None:
    cluster = session.cluster
    assert cluster is not None
    for obj in reversed(created):
        cluster.delete(cluster.resource(obj["apiVersion"], obj["kind"]), obj["metadata"]["name"],
                       obj["metadata"].get("namespace"))
    for obj in reversed(created):
        meta = obj["metadata"]
        try:
            wait_for(cluster, deleted(cluster.resource(obj["apiVersion"], obj["kind"]), meta["name"],
                                      meta.get("namespace")), timeout=REMOVE_SECONDS)
        except WaitTimeout:
            say(session, f"{addon.name}: {describe(obj)} still there after {REMOVE_SECONDS:.0f}s; left to the API "
                "server")


def say(session: RunContext, message: str) -> None:
    """Set-up and removal of add-ons change the cluster: always said, on stderr (upstream logs them too)."""
    print(f"{session.binary}: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class DevicePlugin:
    """A device plugin as found under any name or namespace: the resource it advertises, a fragment
    of its image's reference, and the labels its installers give its pods."""

    addon: Addon
    resource: str
    image: str
    pod_labels: frozenset[tuple[str, str]]


# The GPU Operator, the Helm chart and the static manifest all run NVIDIA's image
# (nvcr.io/nvidia/k8s-device-plugin); the chart labels its pods app.kubernetes.io/name=nvidia-device-plugin,
# the operator app=nvidia-device-plugin-daemonset.
NVIDIA_PLUGIN = DevicePlugin(NVIDIA_DEVICE_PLUGIN, GPU_RESOURCE, "/k8s-device-plugin",
                             frozenset({("app.kubernetes.io/name", "nvidia-device-plugin"),
                                        ("app", "nvidia-device-plugin-daemonset")}))
# The static manifest (aws-samples/aws-efa-eks, upstream's) and the EKS Helm chart run AWS's image
# (.../eks/aws-efa-k8s-device-plugin); the manifest labels its pods name=, the chart app.kubernetes.io/name=.
EFA_PLUGIN = DevicePlugin(EFA_DEVICE_PLUGIN, EFA_RESOURCE, "/aws-efa-k8s-device-plugin",
                          frozenset({("name", "aws-efa-k8s-device-plugin"),
                                     ("app.kubernetes.io/name", "aws-efa-k8s-device-plugin")}))


def provider_of(cluster: Cluster, plugin: DevicePlugin, node_names: tuple[str, ...]) -> str | None:
    """What already provides the plugin's resource, in words, or None: a DaemonSet anywhere that runs
    the plugin (by its image or its pods' labels, whatever its name; the pinned manifest's own object
    and what this project installed are ensure()'s), else the run's nodes that advertise the resource
    with a kubelet behind them (not kwok's, whose capacity is written, not counted). Installing the
    pinned plugin beside another would make two plugins fight over the same devices."""
    stock = {describe(obj) for obj in addon_objects(plugin.addon, "")}
    for ds in cluster.list(cluster.resource("apps/v1", "DaemonSet"))["items"]:
        meta, template = ds["metadata"], ds["spec"]["template"]
        if describe(ds) in stock or (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY:
            continue
        images = [c.get("image", "") for c in template["spec"].get("containers", [])]
        by_image = next((i for i in images if plugin.image in i), None)
        if by_image or plugin.pod_labels & set((template["metadata"].get("labels") or {}).items()):
            return f"DaemonSet {meta['namespace']}/{meta['name']} ({by_image or 'its pods labelled as the plugin'})"
    advertising = [node["metadata"]["name"] for node in cluster.list(cluster.resource("v1", "Node"))["items"]
                   if node["metadata"]["name"] in node_names
                   and KWOK_NODE_ANNOTATION not in (node["metadata"].get("annotations") or {})
                   and int((node.get("status", {}).get("allocatable") or {}).get(plugin.resource, "0")) > 0]
    if advertising:
        return f"nodes {', '.join(advertising)} advertising {plugin.resource} already"
    return None


def ensure_device_plugin(session: RunContext, plugin: DevicePlugin, node_names: tuple[str, ...]) -> None:
    """The pinned plugin, rolled out on the run's nodes, unless something provides its resource already."""
    assert session.cluster is not None, "set up device plugins after connecting"
    provider = provider_of(session.cluster, plugin, node_names)
    if provider is None:
        ensure(session, plugin.addon, node_names)
        return
    addon = plugin.addon
    say(session, f"{addon.name}: {plugin.resource} is provided by {provider}: {addon.version} not installed beside it")
    session.properties[f"addon.{addon.key}"] = f"present before the run as {provider}: not installed, not removed"


def set_up_device_plugins(session: RunContext, node_names: tuple[str, ...]) -> None:
    """The device plugins the configuration asks for, each only where nothing provides its resource
    yet (provider_of): NVIDIA's unless --installDevicePlugin=false, EFA's with --efaEnabled (as upstream,
    which installs the EFA plugin whatever --installDevicePlugin says)."""
    cfg = session.cfg
    if cfg.accelerator != "nvidia":
        return  # no GPUs to advertise
    if cfg.install_device_plugin:
        ensure_device_plugin(session, NVIDIA_PLUGIN, node_names)
    if cfg.efa_enabled:
        ensure_device_plugin(session, EFA_PLUGIN, node_names)
