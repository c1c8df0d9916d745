"""Running the suites through the real kubetest2 binary (noop deployer) and reading their JUnit.

The real trainings several modules judge (the training suite under torchrun, BERT as an MPIJob, the
elastic TrainJob) run once per session, as the ServiceAccount manifests/rbac.yaml grants
(`run_as_service_account`): each module judges what it is
about from the same artifacts, and test_reliability.py that the least-privilege account ran them.
"""

from __future__ import annotations

import os
import subprocess
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import junitparser
import pytest
import yaml
from kubernetes import client
from tiers import trainings

from harness.cluster.client import Cluster
from harness.cluster.labels import MANAGED_BY_LABEL
from harness.cluster.manifests import RBAC_ADDONS, rbac_objects
from harness.config.settings import NCCL_TESTS_IMAGE, WORKLOADS_IMAGE
from harness.framework.suite import TestCase
from harness.verdict.checks import kind_of
from testbins.suites import all_suites

from .conftest import DEFAULT_NODE_SHAPE, INJECT, REPO, LocalCluster, canned_by_default, ensure_default_nodes

# e2e-nvidia's opt-in tests (upstream's flags turn them on): a run without those flags skips them.
OPT_IN_TESTS = frozenset({"TestDcgmDiagnostics", "TestTimeSlicing", "TestMps"})
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
CANNED_LOG_ANNOTATION = f"{INJECT}canned-log"
# Real runs here put two healthy ranks on the same 2 shared cores, whose speed varies 25-50% from
# one window to the next (bench/host_cpu_noise.py); two such ranks' probes measured ratios of 0.89
# at 2 s and 0.63 at 1 s on a busy machine (workloads/probe.py), against the product's
# STRAGGLER_FRACTION of 0.7, which a window 30% slower for one rank crosses: a CI run once named a
# straggler on a host-process node. A test about something
# else judges stragglers at 0.35 instead (still naming a rank at a third of the others' speed);
# the straggler and speed tests give the product's 0.7 themselves.
SHARED_HOST_STRAGGLER_ENV = {"STRAGGLER_FRACTION": "0.35"}


def kt2t_bin() -> Path:
    out = subprocess.run(["bash", "-c", f"source {REPO}/hack/versions.sh && echo $KT2T_BIN"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def canned_by_default_env(pod_annotations: str) -> str:
    """POD_ANNOTATIONS (`k=v,k2=v2`) with conftest's canned_by_default applied."""
    pairs = dict(item.split("=", 1) for item in pod_annotations.split(",") if item)
    return ",".join(f"{key}={value}" for key, value in canned_by_default(pairs).items())


@dataclass(frozen=True)
class Kubetest2Command:
    """A kubetest2 command line with its environment and working folder (for run() or Popen)."""

    args: list[str]
    env: dict[str, str]
    cwd: Path


def kubetest2_command(cluster: LocalCluster, artifacts: Path, tester: str, *args: str,
                      env: dict[str, str] | None = None, canned: bool = True,
                      kubeconfig: Path | None = None) -> Kubetest2Command:
    """`kubetest2 noop --kubeconfig=<cluster> --test=<tester> -- <args>` on CPU nodes.

    canned=True gives the pods a canned log (tests whose names say canned_logs); canned=False lets
    the local cluster run them for real, judging stragglers as SHARED_HOST_STRAGGLER_ENV says.
    kubeconfig: whose credentials the run uses (default: the cluster's admin).
    """
    # The local cluster has the project's images imported: set, as a user of upstream's names must
    # (under nvidia.test a default project image fails at once: harness/jobs/images.py), and from no
    # registry: IfNotPresent, not upstream's Always.
    full_env = {"TRAINING_IMAGE": WORKLOADS_IMAGE, "NCCL_TESTS_IMAGE": NCCL_TESTS_IMAGE,
                "IMAGE_PULL_POLICY": "IfNotPresent",
                **os.environ, "PATH": f"{VENV_BIN}:{kt2t_bin()}:{os.environ['PATH']}",
                "ACCELERATOR": "cpu", "JOB_TIMEOUT": "2m", **({} if canned else SHARED_HOST_STRAGGLER_ENV),
                **(env or {})}
    if canned:
        full_env["POD_ANNOTATIONS"] = canned_by_default_env(full_env.get("POD_ANNOTATIONS", ""))
    full_env.pop("KUBECONFIG", None)  # the deployer's --kubeconfig must be what reaches the tester
    command = ["kubetest2", "noop", f"--kubeconfig={kubeconfig or cluster.kubeconfig}", f"--artifacts={artifacts}",
               f"--rundir={artifacts.parent / 'rundir'}", f"--test={tester}", "--", *args]
    return Kubetest2Command(command, full_env, artifacts.parent)


def kubetest2(cluster: LocalCluster, artifacts: Path, tester: str, *args: str,
              env: dict[str, str] | None = None, timeout: float = 300,
              canned: bool = True, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run kubetest2_command(...) to its end; its output captured."""
    command = kubetest2_command(cluster, artifacts, tester, *args, env=env, canned=canned, kubeconfig=kubeconfig)
    return subprocess.run(command.args, capture_output=True, text=True, env=command.env, timeout=timeout,
                          cwd=command.cwd, check=False)


def junit_cases(artifacts: Path, binary: str) -> dict[str, junitparser.TestCase]:
    """The JUnit's test cases by name; every run read here is also held to its tests' declarations
    (assert_checks_declared): docs/TESTS.md lists what each test declares."""
    xml = junitparser.JUnitXml.fromfile(str(artifacts / f"junit_{binary}.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    assert_checks_declared(cases)
    return cases


def declared_test(case_name: str) -> TestCase:
    """The suites' TestCase of a JUnit case (`TestX` or its subtest `TestX/feature`)."""
    name = case_name.split("/", maxsplit=1)[0]
    found = [t for suite in all_suites() for t in suite.tests if name in (t.name, *t.aliases)]
    assert found, f"JUnit case {case_name}: no suite declares {name}"
    return found[0]


def judged_kinds(case: junitparser.TestCase) -> dict[str, str | None]:
    """Each check the case's `checks.ran` names, with the declared kind it is of (None: none)."""
    # Kinds are declared as their judging modules are imported; loading every suite imports them all,
    # so the answer does not depend on what this process happened to import before.
    all_suites()
    ran = case_properties(case).get("checks.ran", "")
    return {name: (kind.name if (kind := kind_of(name)) else None) for name in ran.split(",") if name}


def assert_checks_declared(cases: dict[str, junitparser.TestCase]) -> None:
    """Every check a case judged is of a kind its test declares (docs/TESTS.md says what judges it)."""
    for name, case in cases.items():
        if not (judged := judged_kinds(case)):
            continue
        declared = {kind.name for kind in declared_test(name).checks}
        stray = {check: kind for check, kind in judged.items() if kind not in declared}
        assert not stray, (f"{name} judged {sorted(stray)}, of kinds its test does not declare ({stray}); "
                           f"it declares {sorted(declared)} (testbins/, checks=)")


def assert_judged_as_declared(name: str, case: junitparser.TestCase) -> None:
    """A healthy run's case judged every check its test declares, those made only in some runs (EFA
    expected, a BASELINE: `only_when`) at most, and nothing else: docs/TESTS.md is what the run did."""
    made = set(judged_kinds(case).values())
    declared = {kind.name: kind for kind in declared_test(name).checks}
    always = {kind_name for kind_name, kind in declared.items() if not kind.only_when}
    assert always <= made <= set(declared), (f"{name}: judged but not declared: {sorted(made - set(declared))}; "
                                             f"declared but not judged: {sorted(always - made)}")


def case_properties(case: junitparser.TestCase) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case._elem.iter("property")}


def suite_properties(artifacts: Path, binary: str) -> dict[str, str]:
    """The <testsuite>'s own properties: the resolved configuration."""
    suite = ET.parse(artifacts / f"junit_{binary}.xml").getroot().find("testsuite")
    assert suite is not None
    properties = suite.find("properties")
    return {p.get("name", ""): p.get("value", "") for p in (properties if properties is not None else [])}


def assert_runner_junit_intact(artifacts: Path) -> None:
    runner = ET.parse(artifacts / "junit_runner.xml").getroot()
    names = [case.get("name") for case in runner.iter("testcase")]
    assert "Test" in names, names  # kubetest2's own phases, untouched by the tester


# ---- runs shared by several modules, as the least-privilege ServiceAccount --------------------------


@dataclass
class SuiteRun:
    """One kubetest2 run of a suite and where its artifacts are."""

    binary: str
    artifacts: Path
    done: subprocess.CompletedProcess[str]

    def cases(self) -> dict[str, junitparser.TestCase]:
        return junit_cases(self.artifacts, self.binary)

    def test_dir(self, test: str) -> Path:
        return self.artifacts / self.binary / test


@dataclass(frozen=True)
class SharedRun:
    """A real run that more than one test module judges (see the module's docstring)."""

    name: str
    binary: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    timeout: float
    # The TrainJob's cluster-wide runtime is the platform's, as Trainer itself is
    # (docs/REAL-CLUSTER.md): the ServiceAccount may only read it, so the admin installs it for the
    # run when the cluster lacks it, as on a real cluster.
    needs_cluster_runtime: bool = False
    # The nodes it runs on (shape, count, EFA per node; the default nodes are put back after it).
    nodes: tuple[str, int, int] = DEFAULT_NODE_SHAPE
    # Canned pod logs (the environment's POD_ANNOTATIONS name them) rather than pods that really run.
    canned: bool = False
    # The suite its JUnit file is named after, when the binary is one of upstream's names.
    suite: str = ""


# The account runs no installer: mpi-operator is the cluster's (an administrator's install, not granted).
AS_SERVICE_ACCOUNT_ENV = (("INSTALL_MPI_OPERATOR", "false"),)
# Every test of the training suite under torchrun (test_training_suites.py; and test_reliability.py:
# every test of the binary as the ServiceAccount).
TRAINING_SUITE = SharedRun("training-suite", "e2e-nvidia-training", ("--test.v",),
                           (("WORKLOAD_SIZE", "tiny"), ("JOB_TIMEOUT", "10m"), *AS_SERVICE_ACCOUNT_ENV), 1500)
# LAUNCHER=mpi: BERT (upstream's MPIJob workload) in every pass, nanoGPT and MNIST in the full tier;
# the elastic test skips (it is torchrun's). test_mpi_launcher.py; test_reliability.py.
MPI_EVERY_TRAINING = {"TestBertTraining": "bert-training", "TestNanoGPTTraining": "nanogpt-training",
                      "TestMNISTTraining": "mnist-training"}
MPI_TRAININGS = {test: MPI_EVERY_TRAINING[test]
                 for test in trainings(tuple(MPI_EVERY_TRAINING), ("TestBertTraining",))}
MPI_RUN = SharedRun("mpi-trainings", "e2e-nvidia-training",
                    ("--test.v", f"--test.run=^({'|'.join(MPI_TRAININGS)}|TestElasticRecovery)$"),
                    (("LAUNCHER", "mpi"), ("WORKLOAD_SIZE", "tiny"), *AS_SERVICE_ACCOUNT_ENV), 420)
# LAUNCHER=trainjob: the elastic test in every pass (a TrainJob that trains nanoGPT, loses a pod,
# restarts its JobSet and resumes), the other three in the full tier: the torchrun and real-node
# tests train them every pass. test_trainjob_launcher.py; test_reliability.py.
TRAINJOB_EVERY_TRAINING = {"TestBertTraining": "throughput", "TestNanoGPTTraining": "tokens_per_s",
                           "TestMNISTTraining": "samples_per_s", "TestElasticRecovery": "tokens_per_s"}
TRAINJOB_TRAININGS = {test: TRAINJOB_EVERY_TRAINING[test]
                      for test in trainings(tuple(TRAINJOB_EVERY_TRAINING), ("TestElasticRecovery",))}
TRAINJOB_ENV = {"LAUNCHER": "trainjob", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m"}
TRAINJOB_RUN = SharedRun("trainjob-trainings", "e2e-nvidia-training",
                         ("--test.v", f"--test.run=^({'|'.join(TRAINJOB_TRAININGS)})$"),
                         (*TRAINJOB_ENV.items(), *AS_SERVICE_ACCOUNT_ENV), 2400, needs_cluster_runtime=True)
CLUSTER_RUNTIME = REPO / "manifests" / "addons" / "torch-distributed-runtime.yaml"
# Upstream's GPU suite under its own name (nvidia.test: upstream's tests alone, the opt-in ones
# skipping) on two p5 nodes with canned GPU output: test_dropin.py; test_reliability.py runs the
# project's own GPU tests beside it as the ServiceAccount.
UPSTREAM_TEST_IMAGE = "public.ecr.aws/example/aws-k8s-tester:nvidia"  # upstream's lines name a real image
NVIDIA_SUITE_ENV = {"ACCELERATOR": "nvidia", "POD_ANNOTATIONS": f"{CANNED_LOG_ANNOTATION}=nvidia-suite",
                    # The canned tables' average bus bandwidth (36-135 GB/s) is far below the table's
                    # single-node floors (460 GB/s on p5): the floor is not what these tests are about.
                    "NCCL_TESTS_MIN_BW": "30"}
UPSTREAM_NVIDIA_RUN = SharedRun("nvidia-suite", "nvidia.test",
                                ("--test.v", "--efaEnabled=true", "--skipUnitTestSubcommand=-s test_04",
                                 f"--nvidiaTestImage={UPSTREAM_TEST_IMAGE}"),
                                (*NVIDIA_SUITE_ENV.items(), *AS_SERVICE_ACCOUNT_ENV), 600, nodes=("p5", 2, 32),
                                canned=True, suite="e2e-nvidia")


def service_account_kubeconfig(cluster: LocalCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates as kubetest2-training in `namespace` (a TokenRequest)."""
    token = cluster.core.create_namespaced_service_account_token(
        "kubetest2-training", namespace, {"spec": {"expirationSeconds": 3600}}).status.token
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
    }))
    return path


def apply_rbac(cluster: LocalCluster, namespace: str, addons: bool = True) -> tuple[Cluster, list[dict[str, Any]]]:
    """manifests/rbac.yaml's objects with the ServiceAccount in `namespace`, applied, and unless
    `addons` is False rbac-addons.yaml's (the suites install the device plugins as upstream's do)."""
    kube = Cluster.connect(str(cluster.kubeconfig))
    labels = {MANAGED_BY_LABEL: "kubetest2-training"}
    objects = rbac_objects(namespace, labels) + (rbac_objects(namespace, labels, RBAC_ADDONS) if addons else [])
    for obj in objects:
        kube.apply(obj)
    return kube, objects


def remove_cluster_rbac(kube: Cluster, objects: list[dict[str, Any]]) -> None:
    """Deletes apply_rbac's objects but the ServiceAccount, which goes with its namespace."""
    for obj in objects:
        if obj["kind"] != "ServiceAccount":
            kube.delete(kube.resource(obj["apiVersion"], obj["kind"]), obj["metadata"]["name"],
                        obj["metadata"].get("namespace"))


# The shared runs of this pytest session, by what was run (this module is imported once a session).
_RUNS: dict[SharedRun, SuiteRun] = {}


def run_as_service_account(cluster: LocalCluster, tmp: pytest.TempPathFactory, spec: SharedRun) -> SuiteRun:
    """`spec` through kubetest2 as the ServiceAccount, once a session: later calls, from any module,
    get that run. It has its own namespace, and the ClusterRole and binding are removed when it ends,
    so that the RBAC tests find the cluster as they expect it."""
    if spec not in _RUNS:
        _RUNS[spec] = _run_as_service_account(cluster, tmp, spec)
    return _RUNS[spec]


def _run_as_service_account(cluster: LocalCluster, tmp: pytest.TempPathFactory, spec: SharedRun) -> SuiteRun:
    if spec.nodes == DEFAULT_NODE_SHAPE:
        ensure_default_nodes(cluster)
    else:
        cluster.set_nodes(*spec.nodes)
    root = tmp.mktemp(spec.name)
    namespace = f"kt2t-sa-{spec.name}-{uuid.uuid4().hex[:5]}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=namespace, labels={"app.kubernetes.io/managed-by": "kubetest2-training-integration"})))
    kube, objects = apply_rbac(cluster, namespace)
    installed = spec.needs_cluster_runtime and not cluster.kubectl(
        "get", "clustertrainingruntimes", "--ignore-not-found", "-o", "name", "torch-distributed").strip()
    if installed:
        cluster.kubectl("apply", "-f", str(CLUSTER_RUNTIME))
    try:
        kubeconfig = service_account_kubeconfig(cluster, namespace, root / "sa.kubeconfig")
        done = kubetest2(cluster, root / "artifacts", "exec", spec.binary, *spec.args, env=dict(spec.env),
                         canned=spec.canned, timeout=spec.timeout, kubeconfig=kubeconfig)
    finally:
        ensure_default_nodes(cluster)
        if installed:
            cluster.kubectl("delete", "-f", str(CLUSTER_RUNTIME), "--ignore-not-found")
        remove_cluster_rbac(kube, objects)
        cluster.core.delete_namespace(namespace, propagation_policy="Background")
    return SuiteRun(spec.suite or spec.binary, root / "artifacts", done)
