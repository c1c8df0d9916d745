"""Faults on the local cluster: each turns into a precise verdict in seconds, with logs kept.

The binary runs as CI runs it (a subprocess, KUBECONFIG and ARTIFACTS set); faults come from
kwok injection (pods that never finish, nodes that go NotReady), signals, timeouts, an API
server restart, and a ServiceAccount bound to manifests/rbac.yaml.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import junitparser
import pytest

from ..conftest import INJECT, LocalCluster, ensure_default_nodes, run_local_cluster, wait_for
from ..kubetest2_runs import (
    MPI_RUN,
    OPT_IN_TESTS,
    TRAINING_SUITE,
    TRAINJOB_RUN,
    UPSTREAM_NVIDIA_RUN,
    SuiteRun,
    apply_rbac,
    case_properties,
    junit_cases,
    remove_cluster_rbac,
    run_as_service_account,
    service_account_kubeconfig,
    suite_properties,
)

pytestmark = pytest.mark.integration

BINARY = str(Path(sys.executable).parent / "e2e-nvidia-training")
# Canned (kwok's stages keep the pods running): real BERT would take minutes on 2 cores.
CANNED = f"{INJECT}canned-log=bert-mpirun-2ranks"
LONG_RUNNING = f"{INJECT}run-duration=10m,{CANNED}"


def start(cluster: LocalCluster, artifacts: Path, *args: str, env: dict[str, str] | None = None,
          kubeconfig: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start the binary on TestBertTraining; returns the process and its test namespace."""
    run_id = uuid.uuid4().hex[:8]
    full_env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig), "ARTIFACTS": str(artifacts),
                "KUBETEST2_RUN_ID": run_id, "ACCELERATOR": "cpu", "JOB_TIMEOUT": "2m", "POD_ANNOTATIONS": CANNED,
                **(env or {})}
    process = subprocess.Popen([BINARY, "--test.run=TestBertTraining", "--test.v", *args], env=full_env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, f"kt2t-{run_id}-testberttraining"


def pods_running(cluster: LocalCluster, namespace: str, count: int = 2) -> bool:
    try:
        pods = cluster.core.list_namespaced_pod(namespace).items
    except Exception:
        return False
    return sum(1 for p in pods if p.status.phase == "Running") >= count


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def failure_of(artifacts: Path) -> junitparser.Failure:
    xml = junitparser.JUnitXml.fromfile(str(artifacts / "junit_e2e-nvidia-training.xml"))
    case = next(c for suite in xml for c in suite if c.name == "TestBertTraining")
    (result,) = case.result
    assert isinstance(result, junitparser.Failure), result
    return result


def namespace_gone_or_terminating(cluster: LocalCluster, namespace: str) -> bool:
    names = {ns.metadata.name: ns for ns in cluster.core.list_namespace().items}
    return namespace not in names or names[namespace].status.phase == "Terminating"


def assert_logs_captured(artifacts: Path) -> None:
    logs = list((artifacts / "e2e-nvidia-training" / "TestBertTraining" / "logs").glob("*.log"))
    assert len(logs) == 2, logs
    for log in logs:
        assert log.read_text().startswith("=== pod bert-training-")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_test_captures_cleans_up_and_writes_junit(cluster: LocalCluster, tmp_path: Path, signum):
    process, namespace = start(cluster, tmp_path, env={"POD_ANNOTATIONS": LONG_RUNNING})
    wait_for(lambda: pods_running(cluster, namespace), 60, "the job's pods to run")
    sent = time.monotonic()
    process.send_signal(signum)
    code, output = finish(process)
    took = time.monotonic() - sent
    assert code == 1, output
    assert took < 30, f"exit took {took:.1f}s after {signum.name}"
    assert failure_of(tmp_path).message.startswith(f"INTERRUPTED: received {signum.name}")
    assert_logs_captured(tmp_path)
    assert namespace_gone_or_terminating(cluster, namespace)


def test_go_test_timeout_fails_running_test_with_timeout(cluster: LocalCluster, tmp_path: Path):
    process, namespace = start(cluster, tmp_path, "--test.timeout=8s", env={"POD_ANNOTATIONS": LONG_RUNNING})
    code, output = finish(process)
    assert code == 2, output  # Go's exit status for a test binary that panics on -test.timeout
    # Go's panic header, printed last, after the logs were captured and JUnit written.
    assert re.search(r"panic: test timed out after 8s\n\trunning tests:\n\t\tTestBertTraining \(\d+s\)\s*$", output), \
        output[-500:]
    assert failure_of(tmp_path).message.startswith("TIMEOUT: -test.timeout 8s expired")
    assert_logs_captured(tmp_path)
    assert namespace_gone_or_terminating(cluster, namespace)


def test_job_timeout_message_starts_with_timeout(cluster: LocalCluster, tmp_path: Path):
    process, _ = start(cluster, tmp_path, env={"POD_ANNOTATIONS": LONG_RUNNING, "JOB_TIMEOUT": "5s"})
    code, output = finish(process)
    assert code == 1, output
    message = failure_of(tmp_path).message
    assert message.startswith("TIMEOUT: waited 5s for job bert-training to succeed"), message
    assert (tmp_path / "e2e-nvidia-training" / "TestBertTraining" / "events.txt").read_text()
    assert_logs_captured(tmp_path)


def test_node_not_ready_mid_run_fails_naming_the_node(default_nodes: LocalCluster, tmp_path: Path):
    process, namespace = start(default_nodes, tmp_path, env={"POD_ANNOTATIONS": LONG_RUNNING})
    wait_for(lambda: pods_running(default_nodes, namespace), 60, "the job's pods to run")
    node = default_nodes.core.list_namespaced_pod(namespace).items[0].spec.node_name
    started = time.monotonic()
    run_local_cluster("node-not-ready", node)
    code, output = finish(process)
    assert code == 1, output
    assert f"node {node} is NotReady" in failure_of(tmp_path).message
    assert time.monotonic() - started < 30
    run_local_cluster("node-ready", node)


def test_a_node_not_ready_before_the_run_fails_the_nodes_check_unless_node_count_chose_fewer(
        default_nodes: LocalCluster, tmp_path: Path):
    """Issue 34: kwok-cpu-1 NotReady before the run; the job ran on kwok-cpu-0 alone and passed.
    Now the `nodes` check names the node and `multi_node` says no traffic crossed a node; with
    NODE_COUNT=1 both pass and say it was the user's choice (the canned 2-rank log then fails ranks)."""
    default_nodes.set_node_ready("kwok-cpu-1", False)
    try:
        process, _ = start(default_nodes, tmp_path / "counted")
        code, output = finish(process)
        assert code == 1, output
        props = case_properties(junit_cases(tmp_path / "counted", "e2e-nvidia-training")["TestBertTraining"])
        assert props["check.nodes"].startswith("fail: the run uses 1 of the 2 kwok-cpu nodes"), props
        assert "left out: kwok-cpu-1 (NotReady)" in props["check.nodes"], props["check.nodes"]
        multi_node = props["check.multi_node"]
        assert multi_node.startswith("fail:") and "no traffic crossed a node" in multi_node, multi_node
        assert failure_of(tmp_path / "counted").message.startswith("the run uses 1 of the 2 kwok-cpu nodes")
        configuration = suite_properties(tmp_path / "counted", "e2e-nvidia-training")
        assert configuration["config.nodes_of_type"] == "kwok-cpu-0=Ready, kwok-cpu-1=NotReady", configuration
        process, _ = start(default_nodes, tmp_path / "chosen", env={"NODE_COUNT": "1"})
        code, output = finish(process)
        props = case_properties(junit_cases(tmp_path / "chosen", "e2e-nvidia-training")["TestBertTraining"])
        assert props["check.nodes"].startswith("pass:") and "the user's choice" in props["check.nodes"], props
        assert props["check.multi_node"].startswith("pass:"), props
    finally:
        default_nodes.set_node_ready("kwok-cpu-1", True)


def test_api_server_restart_mid_wait_resumes(cluster: LocalCluster, tmp_path: Path):
    annotations = f"{INJECT}run-duration=20s,{CANNED}"
    process, namespace = start(cluster, tmp_path, env={"POD_ANNOTATIONS": annotations})
    wait_for(lambda: pods_running(cluster, namespace), 60, "the job's pods to run")
    run_local_cluster("restart", "kube-apiserver")
    code, output = finish(process, timeout=180)
    assert code == 0, output
    assert "--- PASS: TestBertTraining" in output


# ---- least privilege -------------------------------------------------------------------------------


@pytest.fixture
def rbac(cluster: LocalCluster, namespace: str):
    kube, objects = apply_rbac(cluster, namespace)
    yield kube, objects
    remove_cluster_rbac(kube, objects)


def test_suites_pass_as_the_least_privilege_service_account(cluster: LocalCluster, namespace: str, rbac,
                                                             tmp_path: Path):
    kubeconfig = service_account_kubeconfig(cluster, namespace, tmp_path / "sa.kubeconfig")
    process, _ = start(cluster, tmp_path / "artifacts", kubeconfig=kubeconfig)
    code, output = finish(process)
    assert code == 0, output
    assert "--- PASS: TestBertTraining" in output


# What `kubectl auth can-i` must answer for the ServiceAccount: what the tests create, delete and read.
ALLOWED = [("create", "daemonsets.apps"), ("delete", "daemonsets.apps"), ("create", "jobs.batch"),
           ("delete", "jobs.batch"), ("create", "mpijobs.kubeflow.org"), ("delete", "mpijobs.kubeflow.org"),
           ("create", "namespaces"), ("delete", "namespaces"), ("get", "pods/log"), ("list", "events")]
# trainjobs and jobsets: kubectl answers "no" for kinds the cluster does not serve (the local cluster
# serves them once the trainer is installed); tests/unit/harness/setup/test_rbac.py checks their rules.
DENIED = [("get", "secrets"), ("create", "clusterroles.rbac.authorization.k8s.io"),
          ("create", "customresourcedefinitions.apiextensions.k8s.io")]


def can_i(cluster: LocalCluster, namespace: str, verb: str, resource: str) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={cluster.kubeconfig}", "auth", "can-i", verb, resource,
                           f"--as=system:serviceaccount:{namespace}:kubetest2-training", "-n", "kt2t-any"],
                          capture_output=True, text=True, timeout=60, check=False)
    return done.stdout.strip()


def test_kubectl_auth_can_i_as_the_service_account(cluster: LocalCluster, namespace: str, rbac):
    assert {f"{verb} {what}": can_i(cluster, namespace, verb, what) for verb, what in ALLOWED} == \
        {f"{verb} {what}": "yes" for verb, what in ALLOWED}
    assert {f"{verb} {what}": can_i(cluster, namespace, verb, what) for verb, what in DENIED} == \
        {f"{verb} {what}": "no" for verb, what in DENIED}


# Every test of both binaries as the ServiceAccount, in as few runs as cover them, shared with the
# modules that judge the runs themselves (kubetest2_runs.py): the GPU suite on canned p5 nodes (the
# device plugins installed by the account itself), upstream's tests under upstream's name as
# test_dropin.py runs them and the project's own beside them; the training suite really training on
# the CPU nodes, as test_training_suites.py runs it. mpi-operator is the cluster's (an
# administrator's install: not granted).
def run_own_gpu_tests_as_the_service_account(cluster: LocalCluster, namespace: str, tmp_path: Path,
                                             tests: list[str]) -> SuiteRun:
    """e2e-nvidia's `tests` (those upstream's name does not run) on the p5 nodes UPSTREAM_NVIDIA_RUN has."""
    try:
        cluster.set_nodes(*UPSTREAM_NVIDIA_RUN.nodes)
        kubeconfig = service_account_kubeconfig(cluster, namespace, tmp_path / "sa.kubeconfig")
        artifacts = tmp_path / "artifacts"
        full_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "ARTIFACTS": str(artifacts),
                    **dict(UPSTREAM_NVIDIA_RUN.env)}
        done = subprocess.run([str(Path(sys.executable).parent / "e2e-nvidia"), *UPSTREAM_NVIDIA_RUN.args,
                               f"--test.run=^({'|'.join(tests)})$"], env=full_env,
                              capture_output=True, text=True, timeout=1500, check=False)
    finally:
        ensure_default_nodes(cluster)
    return SuiteRun("e2e-nvidia", artifacts, done)


@pytest.mark.parametrize("binary", ["e2e-nvidia", "e2e-nvidia-training"])
def test_every_test_of_both_binaries_passes_as_the_service_account(cluster: LocalCluster, binary: str, tmp_path: Path,
                                                                    tmp_path_factory: pytest.TempPathFactory,
                                                                    request: pytest.FixtureRequest):
    listed = subprocess.run([str(Path(sys.executable).parent / binary), "--test.list=.*"], capture_output=True,
                            text=True, check=True).stdout.split()
    runs = [run_as_service_account(cluster, tmp_path_factory,
                                   UPSTREAM_NVIDIA_RUN if binary == "e2e-nvidia" else TRAINING_SUITE)]
    if binary == "e2e-nvidia":
        own = [test for test in listed if test not in runs[0].cases()]
        assert own, "every e2e-nvidia test runs under upstream's name: nothing of the project's own to run"
        namespace = request.getfixturevalue("namespace")
        request.getfixturevalue("rbac")
        runs.append(run_own_gpu_tests_as_the_service_account(cluster, namespace, tmp_path, own))
    cases = {}
    for run in runs:
        assert run.done.returncode == 0, run.done.stdout[-6000:] + run.done.stderr[-3000:]
        cases.update(run.cases())
    assert set(listed) <= set(cases), f"not run as the ServiceAccount: {set(listed) - set(cases)}"
    # The opt-in tests (--dcgmDiagEnabled, --timeSlicingEnabled, --mpsEnabled), as upstream's: they skip.
    failed = {n: c.result for n, c in cases.items() if not (c.is_passed or (c.is_skipped and n in OPT_IN_TESTS))}
    assert not failed, failed


# One real run, as the ServiceAccount, of each launcher the suites above do not use: an MPIJob (BERT,
# upstream's MPIJob workload) and the elastic TrainJob, which makes its own TrainingRuntime (the
# create/patch/delete rights on trainingruntimes in manifests/rbac.yaml). They are the runs
# test_mpi_launcher.py and test_trainjob_launcher.py judge (kubetest2_runs.py, shared), whose
# cluster-wide runtime the admin installs (the platform's, as Trainer itself is).
LAUNCHERS_AS_SERVICE_ACCOUNT = {"mpi": (MPI_RUN, "TestBertTraining"), "trainjob": (TRAINJOB_RUN, "TestElasticRecovery")}


@pytest.mark.parametrize("launcher", LAUNCHERS_AS_SERVICE_ACCOUNT)
def test_each_launcher_trains_for_real_as_the_service_account(cluster: LocalCluster,
                                                              tmp_path_factory: pytest.TempPathFactory,
                                                              launcher: str):
    spec, test = LAUNCHERS_AS_SERVICE_ACCOUNT[launcher]
    run = run_as_service_account(cluster, tmp_path_factory, spec)
    assert run.done.returncode == 0, run.done.stdout[-6000:]
    assert run.cases()[test].is_passed, run.cases()[test].result


def test_a_right_removed_is_a_clear_error(cluster: LocalCluster, namespace: str, rbac, tmp_path: Path):
    kube, objects = rbac
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/log"]]
    kube.request("PUT", kube.resource("rbac.authorization.k8s.io/v1", "ClusterRole").object_path(
        "kubetest2-training", None), body=role)
    kubeconfig = service_account_kubeconfig(cluster, namespace, tmp_path / "sa.kubeconfig")
    process, _ = start(cluster, tmp_path / "artifacts", kubeconfig=kubeconfig)
    code, output = finish(process)
    assert code == 1, output
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "artifacts" / "junit_e2e-nvidia-training.xml"))
    case = next(c for suite in xml for c in suite if c.name == "TestBertTraining")
    (result,) = case.result
    assert "read log of pod bert-training-" in result.message
    assert "HTTP 403" in result.message and "pods/log" in result.message


# ---- nothing lost: a huge log ---------------------------------------------------------------------

# The peak RSS is read from VmHWM after resetting it (clear_refs 5): a child inherits its parent's
# high-water mark across fork, so ru_maxrss would count pytest's own memory.
CAPTURE_SCRIPT = """
import re, sys
from pathlib import Path
Path("/proc/self/clear_refs").write_text("5")
from harness.cluster.client import Cluster
from harness.cluster.logs import capture_pod_logs
from harness.cluster.resources import POD
kubeconfig, namespace, dest = sys.argv[1:4]
cluster = Cluster.connect(kubeconfig)
pods = cluster.list(POD, namespace, label_selector="job=huge")["items"]
(entry,) = capture_pod_logs(cluster, namespace, pods, Path(dest))
excerpt = entry.excerpt(16 * 1024, 48 * 1024)
peak_kib = int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(entry.path, entry.size, len(excerpt), peak_kib // 1024)
print(excerpt.splitlines()[-1])
"""


def test_a_100_mb_log_is_whole_on_disk_capped_in_junit_with_bounded_memory(cluster: LocalCluster, namespace: str,
                                                                            tmp_path: Path):
    program = ("import sys; line = 'x' * 1023 + '\\n'; "
               "[sys.stdout.write(line) for _ in range(100 * 1024)]; print('the very last line', flush=True)")
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "huge", "namespace": namespace},
           "spec": {"backoffLimit": 0, "template": {
               "metadata": {"labels": {"job": "huge"}},
               "spec": {"restartPolicy": "Never", "containers": [
                   {"name": "print", "image": "python:3", "command": ["python", "-c", program]}]}}}}
    cluster.batch.create_namespaced_job(namespace, job)

    def complete() -> bool:
        status = cluster.batch.read_namespaced_job_status("huge", namespace).status
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])

    wait_for(complete, 120, "the 100 MB job to complete")
    done = subprocess.run([sys.executable, "-c", CAPTURE_SCRIPT, str(cluster.kubeconfig), namespace,
                           str(tmp_path)], capture_output=True, text=True, timeout=300, check=True)
    path, size, excerpt_chars, peak_mib = done.stdout.splitlines()[0].split()
    last_line = done.stdout.splitlines()[1]
    assert int(size) >= 100 * (1 << 20)
    with Path(path).open("rb") as log:
        log.seek(-100, 2)
        assert log.read().rstrip().endswith(b"the very last line")
    assert last_line == "the very last line"  # the excerpt keeps the tail
    assert int(excerpt_chars) < 70 * 1024  # what goes into the JUnit is capped
    assert int(peak_mib) < 200, f"capturing 100 MB peaked at {peak_mib} MiB"
