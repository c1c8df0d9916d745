"""TestGPUPresentLabel and TestNvidiaDRAMultiNode (upstream's test/cases/nvidia-dra): an NCCL
all_reduce_perf MPIJob across every node whose workers get their GPUs and EFAs through DRA
ResourceClaims, one feature per upstream test case (a negative one must stay unschedulable).

upstream's TestMain runs once before the tests; here `set_up` does its work once per run, when the
first test that needs it starts (TestGPUPresentLabel reads node labels only): mpi-operator, the
nvidia.com/gpu.present label, NVIDIA's DRA driver (Helm chart 25.8.1) and dranet, each found when
the nodes' ResourceSlices show it runs, else installed and removed at the end."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.cluster.labels import base_labels
from harness.cluster.manifests import render
from harness.cluster.pods import node_of, pod_role
from harness.cluster.resources import (
    DAEMONSET,
    DEVICE_CLASS,
    MPIJOB,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    Obj,
)
from harness.errors import ClusterError, HarnessError, TestFailure
from harness.framework.context import RunContext, TestContext
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image
from harness.jobs.job import Job, launch
from harness.jobs.launchers import Mpi
from harness.jobs.launchers.base import node_requests
from harness.jobs.workload import Placement, Rendering, Workload
from harness.metrics.records import read_lines
from harness.setup.addons import Addon, addon_objects, ensure, say
from harness.setup.namespaces import namespace_for
from harness.setup.operators import ensure_api
from harness.verdict.checks import Check, Verdict, beyond_upstream, declare
from testbins.nvidia.common import require_gpus
from testbins.nvidia.mpi import NcclSweep, nccl_workload, run_nccl_tests

GPU_DRIVER, RDMA_DRIVER = "gpu.nvidia.com", "dra.net"
GPU_CLASS, EFA_CLASS = "gpu.nvidia.com", "efa.networking.k8s.aws"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# upstream's main_test.go: NVIDIA's chart, pinned, and the DaemonSet it waits for.
HELM_RELEASE, HELM_REPO_NAME, HELM_REPO_URL = "nvidia-dra-driver-gpu", "nvidia-dra", "https://helm.ngc.nvidia.com/nvidia"
HELM_NAMESPACE, HELM_CHART_VERSION = "nvidia-dra-driver-gpu", "25.8.1"
KUBELET_PLUGIN_DAEMONSET = "nvidia-dra-driver-gpu-kubelet-plugin"
DRANET = Addon("dranet (RDMA DRA driver)", "dranet", "aws-k8s-tester's dranet.yaml at 7b403f75")
# Each driver's DaemonSet, the one upstream's TestMain waits for.
DRIVER_DAEMONSETS = {GPU_DRIVER: (HELM_NAMESPACE, KUBELET_PLUGIN_DAEMONSET), RDMA_DRIVER: ("kube-system", "dranet")}
# upstream's DeployDranet and waitForNvidiaDRADriverReady wait 5 minutes each.
DRIVER_READY_SECONDS = 300.0
POLL_SECONDS = 2.0
# upstream's dra_features.go: the negative test's wait for Pending workers; the positive MPIJob's 20 minutes.
NEGATIVE_PENDING_SECONDS = 60.0
POSITIVE_TIMEOUT_SECONDS = 20 * 60.0
MPIJOB_NAME = "multi-node-nccl-test"  # upstream's, for every test case
# upstream's nccl-test-mpijob.yaml.tmpl: `-x` values beyond NCCL_DEBUG=INFO and the launcher's PATH.
UPSTREAM_NCCL_ENV = {"NCCL_BUFFSIZE": "8388608", "NCCL_P2P_NET_CHUNKSIZE": "524288",
                     "NCCL_TUNER_PLUGIN": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so"}

# NCCL's aws-ofi-nccl plugin says which provider it chose and how many NICs it found, per process:
# `<pod>:<pid>:<tid> [<dev>] NCCL INFO NET/OFI Selected provider is efa, ... (found 32 nics)`.
OFI_SELECTED = re.compile(r"(?P<host>[A-Za-z0-9][-A-Za-z0-9.]*):\d+:\d+ \[\d+\] NCCL INFO NET/OFI Selected "
                          r"provider is (?P<provider>\w+).*\(found (?P<nics>\d+) nics\)")

DRA_EFA = declare(
    "dra.efa.<node>", "a worker whose ResourceClaims were allocated EFA devices did not have NCCL send over them: its "
    "ranks' aws-ofi-nccl chose no `efa` provider, or found fewer NICs than its claims were allocated. Informational "
    "unless JUDGE_STRICT (upstream judges the MPIJob's success alone)",
    "the workers' allocated ResourceClaims (status.allocation)", settings=("JUDGE_STRICT",),
    only_when="a test case claims EFA devices (all-efas-all-gpus)")
DRA_UNSCHEDULABLE = declare(
    "dra.unschedulable", "a worker of the negative test case was scheduled (its claim allocated), or is Pending "
    "for another reason than the scheduler's (PodScheduled=False, Unschedulable). Informational unless JUDGE_STRICT "
    "(upstream counts Pending workers alone)",
    "-", settings=("JUDGE_STRICT",), only_when="the negative test case (five-efas-one-gpu-negative-test)")


@dataclass(frozen=True)
class InstanceTopology:
    """upstream's NvidiaInstanceTopology (topology.go): what its test cases assume of a family."""

    family: str
    gpus_per_node: int  # AllGPUCount: what allocationMode All of gpu.nvidia.com counts
    rdma_type: str


TOPOLOGIES = {"p5": InstanceTopology("p5", 8, "efa")}


@dataclass(frozen=True)
class DraCase:
    """One of upstream's testcases/<family>/*.yaml: the claims of the MPIJob's workers (claim name,
    ResourceClaimTemplate) and whether it must fail to schedule."""

    name: str
    claims: tuple[tuple[str, str], ...]
    expect_failure: bool = False


# upstream's testcases/p5/, in the order fs.ReadDir lists them (the features' order).
CASES = (DraCase("all-efas-all-gpus", (("all-efas", "rct-all-efas"), ("all-gpus", "rct-all-gpus"))),
         DraCase("five-efas-one-gpu-negative-test", (("five-efas-one-gpu", "rct-five-efas-one-gpu"),),
                 expect_failure=True))
RCT_TEMPLATE = "dra-p5-resource-claim-templates.yaml"
DEVICE_CLASSES_TEMPLATE = "dra-device-classes.yaml"


def topology_for(node_type: str) -> InstanceTopology:
    """upstream's GetTopologyForNodeType: the family before the first `.`, which must be known."""
    family = node_type.split(".", 1)[0]
    if family not in TOPOLOGIES:
        raise TestFailure(f"invalid -nodeType: unsupported instance family {family!r} (from {node_type!r}); "
                          f"supported: {', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[family]


def claim_templates(namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    return render(RCT_TEMPLATE, {"Namespace": namespace, "Labels": dict(labels)})


def gpu_count(template: Obj, topology: InstanceTopology) -> int:
    """upstream's getGPUCount: a gpu.nvidia.com request's count, the family's GPUs for All, 0 without one."""
    for request in template["spec"]["spec"]["devices"]["requests"]:
        exactly = request.get("exactly", {})
        if exactly.get("deviceClassName") == GPU_CLASS:
            return topology.gpus_per_node if exactly.get("allocationMode") == "All" else int(exactly.get("count", 0))
    return 0


def slots_per_worker(case: DraCase, templates: Iterable[Obj], topology: InstanceTopology) -> int:
    """upstream's ComputeNvidiaMPIJobParams: a slot per GPU the worker's claims ask for."""
    by_name = {t["metadata"]["name"]: t for t in templates}
    missing = [name for _, name in case.claims if name not in by_name]
    if missing:
        raise TestFailure(f"{case.name}: resource claim template(s) {', '.join(missing)} not found in "
                          f"{RCT_TEMPLATE}")
    return sum(gpu_count(by_name[name], topology) for _, name in case.claims)


class DraMpi(Mpi):
    """The mpi launcher's MPIJob, its workers claiming devices through ResourceClaims (upstream's
    nccl-test-mpijob.yaml.tmpl) instead of asking for nvidia.com/gpu and EFA device-plugin resources,
    with a slot per claimed GPU."""

    def __init__(self, claims: tuple[tuple[str, str], ...], slots: int) -> None:
        self.claims, self.slots = claims, slots

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        # EFA comes from the claims: no vpc.amazonaws.com/efa request, no EFA-only variables.
        placement = replace(placement, processes_per_node=self.slots, efa_per_node=0)
        return [replace(r, patch=lambda obj: self.claim_devices(obj, placement))
                for r in super().renderings(workload, placement)]

    def claim_devices(self, obj: Obj, placement: Placement) -> Obj:
        spec = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        spec["resourceClaims"] = [{"name": name, "resourceClaimTemplateName": template}
                                  for name, template in self.claims]
        for container in spec["containers"]:
            requests = node_requests(placement)
            container["resources"] = {"claims": [{"name": name} for name, _ in self.claims],
                                      **({"requests": requests} if requests else {})}
        return obj


# -- set-up: upstream's TestMain, once per run ---------------------------------------------------

@dataclass
class SetUp:
    """What set_up found, or why it failed (every later test fails with the same words, as every
    test of upstream's binary fails when its TestMain does)."""

    topology: InstanceTopology | None = None
    failure: str = ""


_SET_UPS: dict[int, SetUp] = {}


def set_up(t: TestContext) -> InstanceTopology:
    """upstream's TestMain for this run, done once: the flags it requires, the DRA API, mpi-operator,
    the nvidia.com/gpu.present label (unless --autoModeEnabled), NVIDIA's DRA driver and dranet."""
    done = _SET_UPS.get(id(t.session))
    if done is None:
        done = _SET_UPS[id(t.session)] = SetUp()
        try:
            done.topology = _set_up(t)
        except (HarnessError, TestFailure) as exc:
            done.failure = f"nvidia-dra set-up (upstream's TestMain) failed: {exc}"
    if done.failure:
        raise TestFailure(done.failure)
    assert done.topology is not None
    return done.topology


def required_flags(t: TestContext) -> None:
    """upstream's validateConfig: -rdmaDeviceDraDriverImage and -containerTestImage given (the node
    type is discovered here when unset, as in this project's other suites)."""
    if not t.cfg.rdma_device_dra_driver_image:
        raise TestFailure("-rdmaDeviceDraDriverImage is required and must be non-empty (the dranet image, "
                          "RDMA_DEVICE_DRA_DRIVER_IMAGE): upstream's suite deploys dranet with it")


def _set_up(t: TestContext) -> InstanceTopology:
    session, cluster = t.session, t.cluster
    required_flags(t)
    image(t, "container_test_image", needed_for="nvidia-dra's NCCL test MPIJob")
    topology = topology_for(t.topology.node_type)
    if not cluster.serves("resource.k8s.io/v1", "ResourceClaimTemplate"):
        raise TestFailure("this cluster does not serve resource.k8s.io/v1 ResourceClaimTemplates: Dynamic Resource "
                          f"Allocation (GA in Kubernetes 1.34) is needed; the API server is {session.server_version}")
    ensure_api(session, MPIJOB, t.name)
    nodes = t.topology.node_names
    if not t.cfg.auto_mode_enabled:
        label_gpu_present(session, nodes)
    ensure_device_classes(session)
    if not nodes_published(t, GPU_DRIVER, nodes):
        install_nvidia_dra_driver(session)
    if not nodes_published(t, RDMA_DRIVER, nodes):
        objects = addon_objects(DRANET, t.cfg.run_id)
        for obj in objects:
            if obj["kind"] == "DaemonSet":
                obj["spec"]["template"]["spec"]["containers"][0]["image"] = t.cfg.rdma_device_dra_driver_image
        ensure(session, DRANET, nodes, objects)
    for driver, (namespace, daemonset) in DRIVER_DAEMONSETS.items():
        wait_published(t, driver, nodes, namespace, daemonset)
    return topology


def published(slices: Iterable[Obj], driver: str) -> dict[str, list[Obj]]:
    """node -> the devices `driver`'s ResourceSlices publish there."""
    found: dict[str, list[Obj]] = {}
    for item in slices:
        spec = item.get("spec", {})
        if spec.get("driver") == driver and spec.get("nodeName"):
            found.setdefault(spec["nodeName"], []).extend(spec.get("devices") or [])
    return found


def nodes_published(t: TestContext, driver: str, nodes: Iterable[str]) -> bool:
    """Whether `driver` publishes devices on every node: the evidence that it runs there."""
    found = published(t.cluster.list(RESOURCE_SLICE).get("items", []), driver)
    return all(found.get(node) for node in nodes)


def daemonset_ready(daemonset: Obj | None) -> bool:
    """upstream's wait for a driver: its DaemonSet scheduled somewhere and every pod of it Ready."""
    status = (daemonset or {}).get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    return desired > 0 and int(status.get("numberReady") or 0) >= desired


def wait_published(t: TestContext, driver: str, nodes: tuple[str, ...], namespace: str, daemonset: str) -> None:
    """Wait (upstream's 5 minutes) until `driver` publishes devices on every node of the run. upstream
    waits for the driver's DaemonSet to be Ready: once it is, and without JUDGE_STRICT, the run goes on
    as upstream's does, saying which nodes have no ResourceSlice yet (a test case that needs them then
    fails on its own, the negative one may pass, as upstream's)."""
    what = f"{driver} (DaemonSet {namespace}/{daemonset})"
    deadline = time.monotonic() + DRIVER_READY_SECONDS
    while True:
        found = published(t.cluster.list(RESOURCE_SLICE).get("items", []), driver)
        missing = [node for node in nodes if not found.get(node)]
        if not missing:
            say(t.session, f"{driver}: ResourceSlices publish " + ", ".join(
                f"{node} {len(found[node])} device(s)" for node in nodes))
            return
        if not t.cfg.judge_strict and daemonset_ready(t.cluster.get(DAEMONSET, daemonset, namespace)):
            say(t.session, f"{what} is Ready, upstream's criterion, but publishes no device on {', '.join(missing)} "
                "yet: going on as upstream's TestMain does (JUDGE_STRICT=true waits for its ResourceSlices)")
            return
        if time.monotonic() > deadline or t.cancel.is_set():
            # without JUDGE_STRICT the DaemonSet was asked each round above; with it, never
            not_ready = "" if t.cfg.judge_strict else ", and its DaemonSet is not Ready"
            raise TestFailure(f"{what} publishes no device (no ResourceSlice of driver {driver}) on "
                              f"{', '.join(missing)} after {DRIVER_READY_SECONDS:.0f}s{not_ready}: is it running "
                              f"there? (NVIDIA's kubelet plugin runs only on nodes labelled {GPU_PRESENT_LABEL}=true)")
        time.sleep(POLL_SECONDS)


def label_gpu_present(session: RunContext, nodes: tuple[str, ...]) -> None:
    """upstream's labelNodesGPUPresent, on the run's nodes (upstream labels every node of the
    cluster); a label this run added is removed at the end."""
    cluster = session.cluster
    assert cluster is not None
    added = [name for name in nodes
             if ((cluster.get(NODE, name) or {}).get("metadata", {}).get("labels") or {}).get(GPU_PRESENT_LABEL)
             != "true"]
    for name in added:
        try:
            cluster.apply({"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": {GPU_PRESENT_LABEL: "true"}}})
        except ClusterError as exc:
            raise TestFailure(f"labelling node {name} {GPU_PRESENT_LABEL}=true (upstream's suite labels the nodes "
                              f"NVIDIA's kubelet plugin runs on) was refused: {exc}; label the GPU nodes first or "
                              "run with the rights to (docs/RBAC.md)") from None
    if added:
        say(session, f"labelled {', '.join(added)} {GPU_PRESENT_LABEL}=true (removed at the end)")
        session.teardown.callback(unlabel, session, added)


def unlabel(session: RunContext, names: list[str]) -> None:
    cluster = session.cluster
    assert cluster is not None
    for name in names:  # the label is ours (server-side apply): applying the node without it drops it
        try:
            cluster.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        except ClusterError as exc:
            say(session, f"removing {GPU_PRESENT_LABEL} from {name} failed, left: {exc}")


def ensure_device_classes(session: RunContext) -> None:
    """efa.networking.k8s.aws (upstream's dranet manifest declares it) applied when missing and
    removed at the end; gpu.nvidia.com is the chart's, created by its installation."""
    cluster = session.cluster
    assert cluster is not None
    labels = base_labels(session.cfg.run_id, "nvidia-dra")
    (efa,) = [obj for obj in render(DEVICE_CLASSES_TEMPLATE, {"Labels": labels})
              if obj["metadata"]["name"] == EFA_CLASS]
    if cluster.get(DEVICE_CLASS, EFA_CLASS) is None:
        cluster.apply(efa)
        say(session, f"created DeviceClass {EFA_CLASS} (upstream's dranet manifest's; removed at the end)")
        session.teardown.callback(remove_device_class, session)


def remove_device_class(session: RunContext) -> None:
    """The DeviceClass this run created, deleted; a failure is said and the run goes on (its JUnit
    must still be written)."""
    assert session.cluster is not None
    try:
        session.cluster.delete(DEVICE_CLASS, EFA_CLASS)
    except ClusterError as exc:
        say(session, f"deleting DeviceClass {EFA_CLASS} failed, left: {exc}")


def helm_install_command(cfg: Any) -> list[str]:
    """upstream's `helm upgrade --install` of NVIDIA's DRA driver, --acceleratorDraDriverImage split
    on its last `:` into the chart's image.repository and image.tag (upstream's SplitImageRepoTag)."""
    args = ["helm", "upgrade", "--install", HELM_RELEASE, f"{HELM_REPO_NAME}/{HELM_RELEASE}",
            "--version", HELM_CHART_VERSION, "--create-namespace", "--namespace", HELM_NAMESPACE,
            "--set", "resources.gpus.enabled=true", "--set", "gpuResourcesEnabledOverride=true", "--timeout", "5m"]
    if cfg.accelerator_dra_driver_image:
        repository, _, tag = cfg.accelerator_dra_driver_image.rpartition(":")
        if not repository or "/" in tag:  # no tag (a `:` of a registry port is not one): upstream's `latest`
            repository, tag = cfg.accelerator_dra_driver_image, "latest"
        args += ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]
    return args + kube_args(cfg)


def kube_args(cfg: Any) -> list[str]:
    return [*(["--kubeconfig", cfg.kubeconfig] if cfg.kubeconfig else []),
            *(["--kube-context", cfg.kube_context] if cfg.kube_context else [])]


def install_nvidia_dra_driver(session: RunContext) -> None:
    """upstream's installNvidiaDRADriverHelm, when no ResourceSlice shows the driver running; it
    needs helm and the chart repository, else a failure naming both and what to install instead."""
    cfg = session.cfg
    if shutil.which("helm") is None:
        raise TestFailure(f"NVIDIA's DRA driver publishes no ResourceSlice (driver {GPU_DRIVER}) on the run's nodes "
                          f"and helm is not on PATH to install it: put helm on PATH (the chart {HELM_RELEASE} "
                          f"{HELM_CHART_VERSION} comes from {HELM_REPO_URL}), or install that chart first with "
                          "resources.gpus.enabled=true and gpuResourcesEnabledOverride=true")
    for args in (["helm", "repo", "add", HELM_REPO_NAME, HELM_REPO_URL, "--force-update"], helm_install_command(cfg)):
        say(session, "running " + " ".join(args))
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise TestFailure(f"`{' '.join(args[:3])}` failed (exit {done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[-2000:]}; install NVIDIA's DRA driver chart "
                              f"{HELM_RELEASE} {HELM_CHART_VERSION} from {HELM_REPO_URL} first if this network "
                              "cannot reach it")
    session.properties["addon.nvidia-dra-driver-gpu"] = f"installed {HELM_CHART_VERSION} by this run (helm)"
    session.teardown.callback(uninstall_nvidia_dra_driver, session)


def uninstall_nvidia_dra_driver(session: RunContext) -> None:
    args = ["helm", "uninstall", HELM_RELEASE, "--namespace", HELM_NAMESPACE, *kube_args(session.cfg)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    say(session, f"helm uninstall {HELM_RELEASE}: " + ("done" if done.returncode == 0 else
                                                       f"failed (may already be removed): {done.stderr.strip()}"))


# -- the tests -----------------------------------------------------------------------------------

def test_gpu_present_label(t: TestContext) -> None:
    """Skipped unless --autoModeEnabled (the suite labels the nodes itself otherwise); then every node
    of --nodeType must carry nvidia.com/gpu.present=true from its node image, as NVIDIA's kubelet plugin
    runs only there."""
    if not t.cfg.auto_mode_enabled:
        t.skip("-autoModeEnabled not set; the suite labels the nodes itself, so this assertion would be vacuous")

    def labelled() -> None:
        nodes = [n for n in t.cluster.list(NODE).get("items", [])
                 if (n["metadata"].get("labels") or {}).get("node.kubernetes.io/instance-type")
                 == t.topology.node_type]
        if not nodes:
            raise TestFailure(f"no nodes of type {t.topology.node_type} found")
        wrong = [f"node {n['metadata']['name']}: {GPU_PRESENT_LABEL} = "
                 f"{(n['metadata'].get('labels') or {}).get(GPU_PRESENT_LABEL, '')!r}, want 'true'"
                 for n in nodes if (n["metadata"].get("labels") or {}).get(GPU_PRESENT_LABEL) != "true"]
        if wrong:
            raise TestFailure("; ".join(wrong))
        t.logf("all %d %s node(s) carry %s=true", len(nodes), t.topology.node_type, GPU_PRESENT_LABEL)

    t.assessment("GPU nodes are labeled nvidia.com/gpu.present=true by the node image", labelled)


def multi_node(case: DraCase) -> Any:
    """upstream's DiscoverAndBuildFeatures for one test case: its ResourceClaimTemplates in the test's
    namespace and upstream's MPIJob `multi-node-nccl-test` (all_reduce_perf -b 8 -e 16G -n 100, a slot
    per claimed GPU, a worker per node); positive: the MPIJob succeeds within 20 minutes, each worker's
    NCCL using the EFAs its claims were allocated; negative: every worker stays Pending, unschedulable,
    for upstream's 2 minutes."""

    def run(t: TestContext) -> None:
        require_gpus(t)
        topology = set_up(t)
        namespace = namespace_for(t)
        templates = claim_templates(namespace, base_labels(t.cfg.run_id, t.name))
        for template in templates:
            t.cluster.apply(template)
        slots = slots_per_worker(case, templates, topology)
        launcher = DraMpi(case.claims, slots)
        sweep = NcclSweep("all_reduce_perf", MPIJOB_NAME, None, "16G", 8388608, False, upstream=True, iterations=100,
                          extra_env=UPSTREAM_NCCL_ENV, image_setting="container_test_image")
        if case.expect_failure:
            negative(t, sweep, launcher)
        else:
            run_nccl_tests(t, sweep, launcher,
                           more=lambda job: beyond_upstream(efa_checks(t, job), t.name, t.cfg.judge_strict))

    return run


def negative(t: TestContext, sweep: NcclSweep, launcher: DraMpi) -> None:
    """upstream's BuildNegativeFeature: the MPIJob applied; within a minute as many Pending workers as
    nodes, still Pending after the stabilization; each must be unschedulable (the scheduler's
    PodScheduled=False, reason Unschedulable), not Pending on its way to run."""
    job = launch(t, nccl_workload(t, sweep), launcher=launcher)
    expected = t.topology.node_count

    def pending_workers() -> list[Obj]:
        pods = t.cluster.list(POD, job.namespace, label_selector=job.selector).get("items", [])
        return [p for p in pods if pod_role(p) == "worker" and p.get("status", {}).get("phase") == "Pending"]

    def remain_pending() -> None:
        deadline = time.monotonic() + NEGATIVE_PENDING_SECONDS
        while len(pending := pending_workers()) < expected:
            if time.monotonic() > deadline:
                raise TestFailure(f"expected {expected} worker pods in Pending state: {len(pending)} after "
                                  f"{NEGATIVE_PENDING_SECONDS:.0f}s")
            time.sleep(POLL_SECONDS)
        t.logf("Found %d Pending worker pods, waiting %.0fs to confirm they remain unschedulable...", expected,
               t.cfg.dra_pending_stabilization)
        t.cancel.wait(t.cfg.dra_pending_stabilization)
        pending = pending_workers()
        if len(pending) < expected:
            raise TestFailure(f"expected {expected} Pending worker pods after stabilization, but found {len(pending)}")
        record_verdict(t, Verdict(beyond_upstream([unschedulable_check(pending)], t.name, t.cfg.judge_strict)))
        t.logf("All %d worker pods are still Pending after stabilization (scheduling failure confirmed)", expected)

    t.assessment("Worker pods remain Pending", remain_pending)


def unschedulable_check(pending: list[Obj]) -> Check:
    """Each Pending worker unschedulable: unbound, its PodScheduled condition False, Unschedulable."""
    bad = []
    for pod in pending:
        scheduled = next((c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                         {})
        if pod.get("spec", {}).get("nodeName") or scheduled.get("reason") != "Unschedulable":
            bad.append(f"{pod['metadata']['name']} is Pending on node {pod.get('spec', {}).get('nodeName') or '-'} "
                       f"(PodScheduled {scheduled.get('status', '?')}, {scheduled.get('reason') or 'no reason'})")
    if bad:
        return DRA_UNSCHEDULABLE.failed("the negative test's claim was allocated after all: " + "; ".join(bad))
    message = next((c.get("message", "") for c in pending[0].get("status", {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"), "")
    return DRA_UNSCHEDULABLE.passed(f"{len(pending)} workers unschedulable: {message}")


def allocated(claim: Obj, device_class_driver: str) -> int:
    """How many devices of a driver a ResourceClaim was allocated (status.allocation)."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return sum(1 for r in results if r.get("driver") == device_class_driver)


def efa_checks(t: TestContext, job: Job) -> list[Check]:
    """dra.efa per worker node (judge_efa), from the workers' allocated claims and the job's logs;
    each worker's allocation is recorded (dra.<pod>.efa_allocated, dra.<pod>.gpus_allocated)."""
    claims = {c["metadata"]["name"]: c for c in t.cluster.list(RESOURCE_CLAIM, job.namespace).get("items", [])}
    workers: dict[str, tuple[str, int]] = {}
    for name, pod in job.pods_seen.items():
        if pod_role(pod) != "worker":
            continue
        held = [claims[s["resourceClaimName"]] for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                if s.get("resourceClaimName") in claims]
        workers[name] = (node_of(pod), sum(allocated(c, RDMA_DRIVER) for c in held))
        t.property(f"dra.{name}.efa_allocated", workers[name][1])
        t.property(f"dra.{name}.gpus_allocated", sum(allocated(c, GPU_DRIVER) for c in held))
    lines = (line for entry in job.capture_logs() if not entry.previous and entry.path.exists()
             for line in read_lines(entry.path))
    return judge_efa(workers, nics_found(lines))


def judge_efa(workers: Mapping[str, tuple[str, int]], found: Mapping[str, int]) -> list[Check]:
    """worker pod -> (node, EFA devices allocated) against pod -> NICs NCCL found: one check per
    node whose worker was allocated EFAs, failing where NCCL found none or fewer (none made when no
    worker was allocated any: the test case claims no EFA)."""
    checks = []
    for name, (node, wanted) in sorted(workers.items()):
        if not wanted:
            continue
        seen = found.get(name)
        if seen is None:
            checks.append(DRA_EFA.failed(f"dra.efa on node {node}: NCCL on {name} selected no EFA provider (no "
                                         f"`NET/OFI Selected provider is efa` line), though its claims were "
                                         f"allocated {wanted} EFA device(s)", part=node))
        elif seen < wanted:
            checks.append(DRA_EFA.failed(f"dra.efa on node {node}: NCCL on {name} found {seen} EFA NIC(s) of the "
                                         f"{wanted} its claims were allocated", part=node))
        else:
            checks.append(DRA_EFA.passed(f"dra.efa on node {node}: NCCL on {name} found {seen} EFA NIC(s), "
                                         f"{wanted} allocated", part=node))
    return checks


def nics_found(lines: Iterable[str]) -> dict[str, int]:
    """worker pod -> the fewest NICs any of its ranks' aws-ofi-nccl found with the efa provider."""
    found: dict[str, int] = {}
    for line in lines:
        match = OFI_SELECTED.search(line)
        if match and match["provider"] == "efa":
            pod = match["host"].split(".")[0]
            found[pod] = min(found.get(pod, 1 << 30), int(match["nics"]))
    return found
