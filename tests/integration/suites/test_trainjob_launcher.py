"""LAUNCHER=trainjob through the real kubetest2 on the local cluster, with the real Trainer v2.1.0 and
JobSet v0.10.1 controllers `hack/local-cluster up` starts: BERT, nanoGPT, MNIST and the elastic test
train as TrainJobs (pods run for real: torchrun from Trainer's PET_* variables, gloo on CPU); a
TrainJob naming a runtime that does not exist fails in seconds, naming it; and with the TrainJob
CRD deleted the run installs Trainer and JobSet from manifests/addons, waits for their webhooks and
removes them after (`up` puts the CRD back). Judged from the artifacts, as a CI user would.
"""

from __future__ import annotations

import time
from pathlib import Path

import junitparser
import pytest
import yaml
from kubernetes import client

from ..conftest import INJECT, REPO, LocalCluster, ensure_default_nodes, run_local_cluster, wait_for
from ..kubetest2_runs import (
    TRAINJOB_ENV,
    TRAINJOB_RUN,
    TRAINJOB_TRAININGS,
    case_properties,
    junit_cases,
    kubetest2,
    run_as_service_account,
    suite_properties,
)

pytestmark = pytest.mark.integration

BINARY = "e2e-nvidia-training"
WORLD_SIZE = 2  # 2 CPU nodes x 1 process
# The elastic test in every pass, the other three in the full tier (kubetest2_runs.py).
TRAINING = TRAINJOB_TRAININGS
ENV = TRAINJOB_ENV


@pytest.fixture(scope="module")
def trained(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The run is shared (as the ServiceAccount, once a session): test_reliability.py judges its RBAC.
    run = run_as_service_account(cluster, tmp_path_factory, TRAINJOB_RUN)
    done = run.done
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return run.artifacts


def test_the_training_tests_pass_as_trainjobs_with_every_rank_placed(trained: Path):
    cases = junit_cases(trained, BINARY)
    assert set(TRAINING) <= set(cases), sorted(cases)
    for test, throughput in TRAINING.items():
        case = cases[test]
        assert case.is_passed, (test, [r.message for r in case.result])
        props = case_properties(case)
        assert props["launcher"] == "trainjob", (test, props.get("launcher"))
        assert props["metrics.ranks"] == str(WORLD_SIZE)
        for rank in range(WORLD_SIZE):
            assert float(props[f"rank.{rank}.{throughput}"]) > 0
            # JobSet's pod names: <job>-node-0-<completion index>-<suffix>; rank r on index r (1 per node).
            assert f"-node-0-{rank}-" in props[f"rank.{rank}.pod"], props[f"rank.{rank}.pod"]
            assert props[f"rank.{rank}.node"].startswith("kwok-cpu-")
        made = trained / BINARY / test / "manifests"
        (trainjob,) = yaml.safe_load_all((made / "trainjob.yaml").read_text()) if test != "TestElasticRecovery" \
            else [d for d in yaml.safe_load_all((made / "trainjob.yaml").read_text()) if d["kind"] == "TrainJob"]
        assert trainjob["kind"] == "TrainJob"
        kinds = sorted(obj["kind"] for obj in yaml.safe_load_all((made / "trainjob-made.yaml").read_text()) if obj)
        assert "JobSet" in kinds and "Job" in kinds, kinds


def test_the_elastic_trainjob_restarts_its_jobset_and_resumes_recording_the_recovery_time(trained: Path):
    props = case_properties(junit_cases(trained, BINARY)["TestElasticRecovery"])
    assert int(props["jobset.restarts"]) >= 1 and int(props["elastic.restart_count"]) >= 1, props
    assert int(props["elastic.resumed_from_step"]) >= 5
    recovery = float(props["elastic.recovery_seconds"])
    assert 0 < recovery < 600, recovery
    print(f"elastic.recovery_seconds={recovery}")
    runtime = [d for d in yaml.safe_load_all(
        (trained / BINARY / "TestElasticRecovery" / "manifests" / "trainjob-elastic-runtime.yaml").read_text()) if d]
    assert runtime[0]["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 3


def test_a_trainjob_naming_a_missing_runtime_fails_in_seconds_naming_it(cluster: LocalCluster, tmp_path: Path):
    ensure_default_nodes(cluster)
    artifacts = tmp_path / "artifacts"
    started = time.monotonic()
    done = kubetest2(cluster, artifacts, "exec", BINARY, "--test.run=^TestMNISTTraining$", canned=False,
                     timeout=300, env={**ENV, "TRAINJOB_RUNTIME": "no-such-runtime"})
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    case = junit_cases(artifacts, BINARY)["TestMNISTTraining"]
    (failure,) = [r for r in case.result if isinstance(r, junitparser.Failure)]
    assert "TrainJob mnist-training was refused at admission" in failure.message, failure.message
    assert 'ClusterTrainingRuntime.trainer.kubeflow.org "no-such-runtime" not found' in failure.message
    assert "the ClusterTrainingRuntime no-such-runtime (TRAINJOB_RUNTIME) does not exist" in done.stderr
    print(f"missing runtime: test {float(case.time):.2f}s, whole kubetest2 run {elapsed:.1f}s")
    # "In seconds": the refusal ends the test, which does not wait for the job (JOB_TIMEOUT, 10 min).
    # The case holds the runtime check, ADMISSION_RETRY_SECONDS (5 s) of asking again, the capture
    # and the teardown; 15 s broke on the CI's loaded 2 cores. 60 s: room for a host several times
    # slower, a tenth of the JOB_TIMEOUT a missed refusal would wait for.
    assert float(case.time) < 60, case.time


def test_trainer_and_jobset_are_installed_when_the_crd_is_missing_and_removed_after(cluster: LocalCluster,
                                                                                    tmp_path: Path):
    """The TrainJob CRD deleted: TestNCCLAllReduce (LAUNCHER=trainjob) installs what the cluster lacks
    of the pinned JobSet and Trainer (CRD, RBAC, Services, Deployments: kwok plays Trainer's pod,
    whose container has no command), waits for the webhooks to answer a dry run (the local cluster's
    controllers, out of cluster, serve once the CRD is back), trains, and removes what it created.
    JobSet's Deployment is the one object that cannot run here (its container's command, /manager,
    is not on this machine: the node agent would crash-loop it, which fails the install at once, as
    it should): the test puts a canned stand-in in its place first, which the run finds, uses and
    leaves."""
    ensure_default_nodes(cluster)
    stand_in = jobset_deployment_stand_in()
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="jobset-system")))
    apps = client.AppsV1Api(cluster.api)
    apps.create_namespaced_deployment("jobset-system", stand_in)
    extensions = client.ApiextensionsV1Api(cluster.api)
    extensions.delete_custom_resource_definition("trainjobs.trainer.kubeflow.org")
    wait_for(lambda: "trainjobs.trainer.kubeflow.org" not in crds(extensions), 60, "the TrainJob CRD to go")
    try:
        artifacts = tmp_path / "artifacts"
        # The install path is judged here, not speed: on a loaded 2-core machine one node's probe
        # can read 0.6x the other's (the straggler verdict has tests of its own).
        done = kubetest2(cluster, artifacts, "exec", "e2e-nvidia", "--test.run=^TestNCCLAllReduce$", canned=False,
                         timeout=900, env={**ENV, "STRAGGLER_FRACTION": "0.01"})
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        assert ("needs the TrainJob CRD (trainer.kubeflow.org/v1alpha1), which this cluster does not serve"
                in done.stderr)
        (created,) = [line for line in done.stderr.splitlines() if "Kubeflow Trainer v2.1.0: created" in line]
        assert "CustomResourceDefinition trainjobs.trainer.kubeflow.org" in created, created
        assert "Deployment kubeflow-system/kubeflow-trainer-controller-manager" in created, created
        assert "JobSet's admission webhook answers" in done.stderr
        props = suite_properties(artifacts, "e2e-nvidia")
        assert props["addon.trainer"] == "installed v2.1.0 by this run, removed at the end", props
        assert props["addon.jobset"] == "installed v0.10.1 by this run, removed at the end", props
        assert case_properties(junit_cases(artifacts, "e2e-nvidia")["TestNCCLAllReduce"])["launcher"] == "trainjob"
        assert "trainjobs.trainer.kubeflow.org" not in crds(extensions)
        assert apps.read_namespaced_deployment("jobset-controller-manager", "jobset-system")  # left as found
    finally:
        cluster.core.delete_namespace("jobset-system")
        run_local_cluster("up")  # puts the CRD back


def jobset_deployment_stand_in() -> dict:
    """JobSet's Deployment from the pinned manifest, its pod canned (kwok runs it, Ready)."""
    (deployment,) = [doc for doc in yaml.safe_load_all((REPO / "manifests" / "addons" / "jobset.yaml").read_text())
                     if doc and doc["kind"] == "Deployment"]
    template = deployment["spec"]["template"]["metadata"]
    template.setdefault("annotations", {})[f"{INJECT}canned-log"] = "bert-mpirun-32ranks"
    return deployment


def crds(extensions: client.ApiextensionsV1Api) -> set[str]:
    return {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
