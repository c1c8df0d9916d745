"""GPU sharing (TestTimeSlicing, TestMps; issue 23 item 14): the judgement on canned figures, the
objects that replace the device plugin (read back by the local cluster's stand-in, as a plugin reads
its config file), the restoration's order and guards on a recording cluster, and the stand-in's
replica slots."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harness.cluster.pods import run_interval
from harness.config.settings import resolve
from harness.errors import ClusterError, ConfigError, TestFailure
from harness.framework.cli import parse_args
from harness.setup import gpu_sharing as setup
from harness.setup.addons import NVIDIA_DEVICE_PLUGIN, addon_objects
from harness.verdict.checks import Status
from harness.verdict.gpu_sharing import (
    GpuReport,
    advertised_in_sum,
    check_advertised,
    check_compute_mode,
    check_overlap,
    check_uuids,
    parse_report,
    peak_overlap,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from localcluster.emulation import gpu_sharing as standin

# -- the judgement ----------------------------------------------------------------------------------


def test_advertised_is_physical_times_replicas_on_every_node():
    passed = check_advertised({"a": 32, "b": 32}, {"a": 8, "b": 8}, 4)
    assert passed.status is Status.PASS and passed.measured == 64
    failed = check_advertised({"a": 32, "b": 8}, {"a": 8, "b": 8}, 4)
    assert failed.status is Status.FAIL
    assert "b advertises 8 nvidia.com/gpu, expected 32 (8 GPUs x 4 replicas)" in failed.message
    assert "a advertises" not in failed.message


def test_upstream_compares_the_sum_of_what_the_nodes_advertise():
    """upstream's criterion: nodes that make up physical x replicas unevenly pass there (the per-node
    check is then informational unless JUDGE_STRICT, harness/jobs/gpu_sharing.py)."""
    assert advertised_in_sum({"a": 40, "b": 24}, {"a": 8, "b": 8}, 4)
    assert check_advertised({"a": 40, "b": 24}, {"a": 8, "b": 8}, 4).status is Status.FAIL
    assert not advertised_in_sum({"a": 32, "b": 8}, {"a": 8, "b": 8}, 4)
    assert not advertised_in_sum({"a": 32}, {"a": 8, "b": 8}, 4)


def test_overlap_needs_more_pods_at_once_than_gpus():
    together = {f"p{i}": (100.0, 130.0 + i) for i in range(8)}
    assert peak_overlap(together.values()) == 8
    assert check_overlap(together, 8, 2).status is Status.PASS
    # Taking turns on one GPU: each pod frees it as it exits (an end and a start at one instant do not overlap).
    in_turn = {f"p{i}": (100.0 + i, 101.0 + i) for i in range(4)}
    assert peak_overlap(in_turn.values()) == 1
    turns = check_overlap(in_turn, 4, 1)
    assert turns.status is Status.FAIL and "no GPU was shown to be shared" in turns.message
    partly = {**{f"p{i}": (100.0, 110.0) for i in range(3)}, "p3": (110.0, 120.0)}
    assert check_overlap(partly, 4, 2).status is Status.FAIL
    assert "3 of the 4 pods ran at the same time" in check_overlap(partly, 4, 2).message
    assert "1 of 4 pods have no run" in check_overlap({k: together[k] for k in ("p0", "p1", "p2")}, 4, 1).message


def reports(uuids: list[str], mode: str = "Default") -> dict[str, GpuReport | None]:
    return {f"p{i}": GpuReport(f"p{i}", "n", uuid, mode) for i, uuid in enumerate(uuids)}


def test_uuids_name_no_more_gpus_than_the_node_and_none_beyond_its_replicas():
    assert check_uuids(reports(["GPU-a"] * 4 + ["GPU-b"] * 4), 2, 4).status is Status.PASS
    assert "more than the nodes' 2" in check_uuids(reports(["GPU-a", "GPU-b", "GPU-c", "GPU-a"]), 2, 4).message
    assert "GPU-a to 5 pods" in check_uuids(reports(["GPU-a"] * 5), 2, 4).message
    assert "none was shared" in check_uuids(reports(["GPU-a", "GPU-b"]), 2, 4).message
    silent = check_uuids({**reports(["GPU-a", "GPU-a"]), "p9": None}, 2, 4)
    assert silent.status is Status.FAIL and "p9" in silent.message


def test_compute_mode_and_the_report_line():
    report = parse_report("p", "n", ["# CANNED", "GPU-00000000-1111-2222-3333-444455556666, Exclusive_Process"])
    assert report == GpuReport("p", "n", "GPU-00000000-1111-2222-3333-444455556666", "Exclusive_Process")
    assert parse_report("p", "n", ["{gpu_uuid}, {compute_mode}"]) is None
    assert check_compute_mode([report]).status is Status.PASS
    wrong = check_compute_mode([report, GpuReport("q", "n", "GPU-1", "Default")])
    assert wrong.status is Status.FAIL and "Default (1 pods)" in wrong.message


def test_a_pods_run_interval_comes_from_its_terminated_containers():
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {
        "startedAt": "2026-12-02T07:00:00Z", "finishedAt": "2026-12-02T07:00:30Z"}}}]}}
    start, end = run_interval(pod)  # type: ignore[misc]
    assert end - start == 30
    assert run_interval({"status": {"containerStatuses": [{"state": {"running": {}}}]}}) is None


# -- the objects, read back as the plugin (the local cluster's stand-in) reads them ----------------------

@pytest.mark.parametrize("mode", [setup.TIME_SLICING, setup.MPS])
def test_the_sharing_plugin_replaces_the_stock_one_under_its_name(mode: setup.SharingMode):
    objects = setup.sharing_objects(mode, 4, "run1", [], {"a": "b"})
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    expected = [("ConfigMap", setup.CONFIG_MAP)] + ([("DaemonSet", setup.MPS_DAEMON_DS)] if mode.mps else []) + \
        [("DaemonSet", setup.PLUGIN_NAME)]
    assert kinds == expected
    plugin, config_map = objects[-1], objects[0]
    (stock,) = addon_objects(NVIDIA_DEVICE_PLUGIN, "run1")
    assert plugin["spec"]["selector"] == stock["spec"]["selector"]
    assert plugin["spec"]["template"]["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config == {"version": "v1", "sharing": {mode.config_key: {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}]}}}
    # What the local cluster's stand-in reads back is what the plugin would.
    assert standin.config_source(plugin) == ("kube-system", setup.CONFIG_MAP, "config.yaml")
    assert standin.replicas_of(config_map["data"]["config.yaml"]) == (mode.config_key, 4)
    assert standin.config_source(stock) is None
    assert not standin.runs_mps_daemon(plugin)
    if mode.mps:
        daemon = objects[1]
        assert standin.runs_mps_daemon(daemon)
        assert daemon["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}
        env = {e["name"]: e.get("value") for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["MPS_ROOT"] == "/run/nvidia/mps"
        # The stock plugin's tolerations, as the harness extends them, on the daemon too.
        assert daemon["spec"]["template"]["spec"]["tolerations"] == plugin["spec"]["template"]["spec"]["tolerations"]


# -- the restoration, on a recording cluster --------------------------------------------------------------

class RecordingCluster:
    """Records deletes and applies; `fail_on` names a (verb, kind/name) that raises."""

    def __init__(self, fail_on: tuple[str, str] | None = None, live: dict[str, Any] | None = None,
                 denied: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.applied: list[dict[str, Any]] = []
        self.fail_on = fail_on
        self.live = live  # what get() finds (a device plugin present before the run)
        self.denied = denied  # the resources an access review refuses (the add-on rights: "addons")
        self.reviewed: list[tuple[str, str, str, str | None]] = []

    def allowed(self, verb: str, group: str, resource: str, namespace: str | None = None) -> bool:
        self.reviewed.append((verb, group, resource, namespace))
        return resource not in self.denied

    def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.live

    def resource(self, api_version: str, kind: str) -> Any:
        return SimpleNamespace(kind=kind, api_version=api_version, plural=kind.lower() + "s")

    def _record(self, verb: str, what: str) -> None:
        self.calls.append((verb, what))
        if self.fail_on == (verb, what):
            raise ClusterError(f"{verb} {what}: refused")

    def delete(self, resource: Any, name: str, namespace: str | None = None) -> bool:
        self._record("delete", f"{resource.kind}/{name}")
        return True

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._record("apply", f"{obj['kind']}/{obj['metadata']['name']}")
        self.applied.append(obj)
        return obj


def sharing_on(cluster: RecordingCluster, mode: setup.SharingMode, installed: str = "installed v0.17.2 by this run"
               ) -> setup.GpuSharing:
    cfg = resolve(parse_args([]), {})
    session = SimpleNamespace(binary="e2e-nvidia", cfg=cfg, cluster=cluster, properties={
        "addon.nvidia-device-plugin": installed}, teardown=SimpleNamespace(callback=lambda f: None))
    return setup.GpuSharing(session, mode, 4, ("n1", "n2"), physical={"n1": 8, "n2": 8},  # type: ignore[arg-type]
                            workload=("ns", "job=x"), changed=True)


@pytest.fixture
def waited(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(setup, "wait_for", lambda _c, condition, **_kw: names.append(condition.name) or "ok")
    return names


def test_mps_is_restored_in_order_once(waited: list[str]):
    cluster = RecordingCluster()
    sharing = sharing_on(cluster, setup.MPS)
    sharing.restore()
    sharing.restore()  # from the test's cleanup, then the run's teardown: once
    assert cluster.calls == [
        ("delete", f"DaemonSet/{setup.MPS_DAEMON_DS}"),
        ("apply", "Job/gpu-compute-mode-reset-n1"), ("apply", "Job/gpu-compute-mode-reset-n2"),
        ("delete", "Job/gpu-compute-mode-reset-n1"), ("delete", "Job/gpu-compute-mode-reset-n2"),
        ("delete", f"DaemonSet/{setup.PLUGIN_NAME}"),
        ("delete", f"ConfigMap/{setup.CONFIG_MAP}"),
        ("apply", f"DaemonSet/{setup.PLUGIN_NAME}")]
    assert waited[0] == "no pod (job=x) left in ns"  # the workload drained first
    assert waited[-1] == "allocatable nvidia.com/gpu n1: 8, n2: 8"  # the nodes advertise their GPUs as before
    assert sharing.session.properties["gpu_sharing.mps"] == "restored"
    # The plugin put back is the stock one, exactly as the run installed it.
    assert cluster.applied[-1] == addon_objects(NVIDIA_DEVICE_PLUGIN, sharing.session.cfg.run_id)[0]


def test_a_failed_step_is_said_and_the_next_ones_run(waited: list[str], capsys: pytest.CaptureFixture[str]):
    cluster = RecordingCluster(fail_on=("delete", f"DaemonSet/{setup.MPS_DAEMON_DS}"))
    sharing = sharing_on(cluster, setup.MPS)
    sharing.restore()
    assert cluster.calls[-1] == ("apply", f"DaemonSet/{setup.PLUGIN_NAME}")
    assert ("apply", "Job/gpu-compute-mode-reset-n1") in cluster.calls
    outcome = sharing.session.properties["gpu_sharing.mps"]
    assert outcome.startswith("restore failed: MPS control daemon removed: delete DaemonSet/")
    assert "restoring: MPS control daemon removed failed, going on" in capsys.readouterr().err


def test_time_slicing_restores_without_the_mps_steps(waited: list[str]):
    cluster = RecordingCluster()
    sharing_on(cluster, setup.TIME_SLICING).restore()
    assert [c for c in cluster.calls if "mps" in c[1] or "reset" in c[1]] == []
    assert cluster.calls[-1] == ("apply", f"DaemonSet/{setup.PLUGIN_NAME}")


def platform_plugin() -> dict[str, Any]:
    """A device plugin another installer left in the stock one's place, as the API server returns it."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": setup.PLUGIN_NAME, "namespace": setup.PLUGIN_NAMESPACE, "uid": "u-1",
                         "resourceVersion": "42", "labels": {"owner": "platform"},
                         "annotations": {"deprecated.daemonset.template.generation": "3", "note": "theirs"}},
            "spec": {"selector": {"matchLabels": {"app": "platform-plugin"}},
                     "template": {"metadata": {"labels": {"app": "platform-plugin"}}, "spec": {"containers": []}}},
            "status": {"numberReady": 2}}


def test_a_plugin_present_before_the_run_is_replaced_and_put_back_as_it_was(waited: list[str]):
    # upstream's: the plugin under its name is replaced whoever installed it (ours used to refuse).
    cluster = RecordingCluster(live=platform_plugin())
    sharing = sharing_on(cluster, setup.TIME_SLICING, installed="present before the run: not installed, not removed")
    sharing.changed = False
    sharing.share()
    assert cluster.calls[0] == ("delete", f"DaemonSet/{setup.PLUGIN_NAME}")
    assert "no pod (app=platform-plugin) left in kube-system" in waited  # its own pods, by its selector
    sharing.restore()
    put_back = cluster.applied[-1]
    assert put_back == {"apiVersion": "apps/v1", "kind": "DaemonSet",
                        "metadata": {"name": setup.PLUGIN_NAME, "namespace": setup.PLUGIN_NAMESPACE,
                                     "labels": {"owner": "platform"}, "annotations": {"note": "theirs"}},
                        "spec": platform_plugin()["spec"]}
    assert "a Ready pod (app=platform-plugin) on each of n1, n2" in waited
    assert sharing.session.properties["gpu_sharing.time-slicing"] == "restored"


def test_no_plugin_to_replace_fails_and_touches_nothing(waited: list[str]):
    cluster = RecordingCluster(live=None)
    sharing = sharing_on(cluster, setup.TIME_SLICING, installed="")
    sharing.changed = False
    with pytest.raises(TestFailure, match="no NVIDIA device plugin .* to replace"):
        sharing.share()
    sharing.restore()  # the test's cleanup: nothing was changed, nothing is touched
    assert cluster.calls == [] and waited == []


# -- the stand-in's replica slots --------------------------------------------------------------------------

def gpu_pod(uid: str, node: str = "kwok-p5-0", gpus: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    return {"metadata": {"uid": uid}, "spec": {"nodeName": node, "containers": [{"resources": {"limits": limits}}]}}


def test_the_standin_hands_out_each_gpu_replicas_times_and_frees_it():
    sharing = standin.GpuSharing(api=None)  # type: ignore[arg-type]
    uuids = [sharing.assign(gpu_pod(f"u{i}"), 4) for i in range(8)]
    assert uuids[:4] == [standin.gpu_uuid("kwok-p5-0", 0)] * 4 and uuids[4:] == [standin.gpu_uuid("kwok-p5-0", 1)] * 4
    assert sharing.assign(gpu_pod("u0"), 4) == uuids[0]  # the same pod, the same GPU
    sharing.release("u2")
    assert sharing.assign(gpu_pod("new"), 4) == uuids[2]  # the freed replica is handed out again
    assert sharing.assign(gpu_pod("cpu", gpus=0), 4) is None
    assert sharing.substitutions(gpu_pod("u1"))["{compute_mode}"] == "Default"
    sharing.sharing = standin.Sharing(4, "mps", mps_daemon=True)
    assert sharing.substitutions(gpu_pod("u1")) == {"{compute_mode}": "Exclusive_Process", "{gpu_uuid}": uuids[1]}


# -- the workload ------------------------------------------------------------------------------------------

def test_the_shared_gpu_jobs_fill_every_node_with_one_gpu_pods_at_once():
    # upstream counts the allocatable GPUs of every node of the type (ours used to fill one node).
    from harness.cluster.manifests import render
    from harness.jobs.gpu_sharing import SHARING_SCRIPT
    from harness.jobs.launchers import LAUNCHERS
    from harness.jobs.workload import Placement, Workload

    where = Placement(namespace="ns", labels={"kubetest2-training/job": "gpu-sharing-mps",
                                              "app.kubernetes.io/managed-by": "kubetest2-training"},
                      pod_annotations={"a": "b"}, pod_env={}, node_type="p5.48xlarge", node_names=("n0", "n1"),
                      processes_per_node=8, efa_per_node=0, accelerator="nvidia", image="img", job_timeout=60.0)
    workload = Workload("gpu-sharing-mps", binary="sh", args=("-c", SHARING_SCRIPT), launcher="shared-gpu", pods=32)
    launcher = LAUNCHERS["shared-gpu"]
    jobs = [o for r in launcher.renderings(workload, where) for o in render(r.template, r.fields)]
    assert [job["metadata"]["name"] for job in jobs] == ["gpu-sharing-mps-n0", "gpu-sharing-mps-n1"]
    for job, node in zip(jobs, ("n0", "n1"), strict=True):
        assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (32, 32)
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeName"] == node and pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
        assert pod["containers"][0]["command"] == ["sh", "-c", SHARING_SCRIPT]
        assert job["spec"]["template"]["metadata"]["labels"]["kubetest2-training/job"] == "gpu-sharing-mps"
    assert "--query-gpu=uuid,compute_mode --format=csv,noheader" in SHARING_SCRIPT
    assert launcher.succeeded(workload, where).name == "64 pods (kubetest2-training/job=gpu-sharing-mps) to succeed"


class FakeApi:
    """The local cluster's API as the stand-in uses it: DaemonSets, one ConfigMap, nodes, status patches."""

    def __init__(self, daemonsets: list[dict[str, Any]], config_map: dict[str, Any] | None,
                 node_labels: dict[str, dict[str, str]]) -> None:
        self.daemonsets, self.config_map = daemonsets, config_map
        self.nodes = {name: {"metadata": {"name": name, "labels": {"kubetest2-training.local/node": "p5", **labels}},
                             "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
                      for name, labels in node_labels.items()}

    def get(self, kind: str, **_query: str) -> dict[str, Any]:
        return {"items": self.daemonsets if kind == "DaemonSet" else list(self.nodes.values())}

    def get_or_none(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.config_map if (kind, name) == ("ConfigMap", setup.CONFIG_MAP) else None

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str = "",
                    subresource: str = "") -> None:
        assert (kind, subresource) == ("Node", "status")
        for key, value in patch["status"].items():
            self.nodes[name]["status"][key].update(value)

    def advertised(self) -> dict[str, str]:
        return {name: node["status"]["allocatable"]["nvidia.com/gpu"] for name, node in self.nodes.items()}


@pytest.mark.parametrize(("mode", "with_daemon", "expected"), [
    (setup.TIME_SLICING, False, "32"), (setup.MPS, True, "32"), (setup.MPS, False, "8")])
def test_the_standin_advertises_what_the_plugin_it_sees_would(mode: setup.SharingMode, with_daemon: bool,
                                                               expected: str):
    objects = setup.sharing_objects(mode, 4, "run1", [], {})
    daemonsets = [o for o in objects
                  if o["kind"] == "DaemonSet" and (with_daemon or "mps" not in o["metadata"]["name"])]
    api = FakeApi(daemonsets, objects[0], {"kwok-p5-0": {}, "kwok-p5-1": {standin.SHARING_OFF_LABEL: "off"}})
    sharing = standin.GpuSharing(api)  # type: ignore[arg-type]
    sharing.refresh()
    assert api.advertised() == {"kwok-p5-0": expected, "kwok-p5-1": "8"}  # the labelled node does not share
    assert sharing.sharing.mps_daemon is with_daemon
    # The stock plugin back: every node at its GPUs again.
    api.daemonsets = addon_objects(NVIDIA_DEVICE_PLUGIN, "run1")
    sharing.refresh()
    assert api.advertised() == {"kwok-p5-0": "8", "kwok-p5-1": "8"}
    assert sharing.sharing == standin.Sharing()


def test_the_standin_refreshes_only_when_a_plugin_daemonset_changes():
    sharing = standin.GpuSharing(api=None)  # type: ignore[arg-type]
    refreshed: list[str] = []
    sharing.refresh = lambda: refreshed.append("x")  # type: ignore[method-assign]
    (plugin,) = addon_objects(NVIDIA_DEVICE_PLUGIN, "run1")
    plugin["metadata"].update(uid="u1", generation=1)
    other = {"metadata": {"uid": "u2", "generation": 1}, "spec": {"template": {"spec": {"containers": [
        {"image": "busybox", "command": ["sh"]}]}}}}
    for event, ds in [("ADDED", plugin), ("MODIFIED", plugin), ("ADDED", other), ("MODIFIED", other)]:
        sharing.on_event(event, ds)
    assert refreshed == ["x"]  # the plugin's status updates and other DaemonSets do not list the nodes again
    plugin["metadata"]["generation"] = 2
    sharing.on_event("MODIFIED", plugin)
    sharing.on_event("DELETED", plugin)
    assert refreshed == ["x"] * 3


class Skipped(Exception):
    pass


def context(*flags: str, **env: str) -> Any:
    """The little of a TestContext the tests read before they touch the cluster."""
    def skip(reason: str) -> None:
        raise Skipped(reason)
    return SimpleNamespace(cfg=resolve(parse_args(list(flags)), env), skip=skip)


@pytest.mark.parametrize(("mode", "flag"), [(setup.TIME_SLICING, "--timeSlicingEnabled"), (setup.MPS, "--mpsEnabled")])
def test_off_by_default_and_skipped_without_the_plugin_install(mode: setup.SharingMode, flag: str):
    from testbins.nvidia.gpu_sharing import gpu_sharing

    with pytest.raises(Skipped, match=f"set {flag} to run"):
        gpu_sharing(mode)(context())
    # upstream's: skipped, not failed (the plugin to reconfigure must be the suite's own)
    with pytest.raises(Skipped, match=f"skipping {mode.name}; requires --installDevicePlugin"):
        gpu_sharing(mode)(context(flag, "--installDevicePlugin=false"))
    with pytest.raises(TestFailure, match="ACCELERATOR=cpu"):
        gpu_sharing(mode)(context(flag, ACCELERATOR="cpu"))


def test_sharing_without_the_addon_rights_stops_before_changing_anything():
    # The run-only account (manifests/rbac.yaml alone): an access review of the add-on rights says no,
    # so the plugin is neither deleted nor replaced, and the error names the file that grants them.
    cluster = RecordingCluster(denied=frozenset({"addons"}))
    sharing = sharing_on(cluster, setup.TIME_SLICING)
    sharing.changed = False
    with pytest.raises(ConfigError) as raised:
        sharing.share()
    assert "install kubetest2-training/addons in kube-system" in str(raised.value)
    assert "apply manifests/rbac-addons.yaml" in str(raised.value)
    assert cluster.calls == [] and not sharing.changed
    assert ("create", "", "configmaps", "kube-system") in cluster.reviewed
    assert ("create", "batch", "jobs", "kube-system") in cluster.reviewed
