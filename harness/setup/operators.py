"""The operators a launcher's API needs, installed when the cluster lacks them: mpi-operator for the
MPIJob CRD (INSTALL_MPI_OPERATOR), Kubeflow Trainer and JobSet for the TrainJob CRD (INSTALL_TRAINER,
harness/setup/trainer.py); else a ConfigError naming what is missing. DLRover's operator (the
ElasticJob CRD) is never installed by the suite: its published manifests pull the operator and
master images from DLRover's own registry, which the suite does not choose for a cluster. Called before a test's job is
launched (harness.jobs.job.launch), so only the APIs the selected tests use are installed.
"""

from __future__ import annotations

from harness.cluster.manifests import DLROVER_MASTER_ROLE as MASTER_CLUSTER_ROLE
from harness.cluster.manifests import rbac_objects
from harness.cluster.resources import CLUSTER_ROLE, ELASTICJOB, TRAINJOB, Resource
from harness.errors import ConfigError
from harness.framework.context import RunContext
from harness.setup.addons import MPI_OPERATOR, ensure, say
from harness.setup.trainer import ensure_trainjob_api


def ensure_api(session: RunContext, api: Resource, needed_by: str) -> None:
    """The cluster serves `api`, its operator installed first when it is missing and allowed."""
    if api is TRAINJOB:
        ensure_trainjob_api(session, needed_by)
        return
    cluster = session.cluster
    assert cluster is not None
    if api is ELASTICJOB:
        ensure_elasticjob_api(session, needed_by)
        return
    if cluster.serves(api.api_version, api.kind):
        return
    if not session.cfg.install_mpi_operator:
        raise ConfigError(f"{needed_by} needs the {api.kind} CRD ({api.api_version}), which this cluster does not "
                          "serve, and INSTALL_MPI_OPERATOR=false: install mpi-operator or let the suite install it")
    say(session, f"{needed_by} needs the {api.kind} CRD ({api.api_version}), which this cluster does not serve: "
        f"installing {MPI_OPERATOR.name} {MPI_OPERATOR.version}")
    ensure(session, MPI_OPERATOR, ())


def ensure_elasticjob_api(session: RunContext, needed_by: str) -> None:
    """LAUNCHER=dlrover: the cluster serves ElasticJobs (DLRover's operator is installed; else a
    ConfigError saying so) and has the ClusterRole each job's master is bound to, created from
    manifests/rbac.yaml when missing and this account may (an administrator's run: hack/main-job),
    else a ConfigError naming the file. A master without it cannot create its workers: the job
    would wait out JOB_TIMEOUT with no pod."""
    cluster = session.cluster
    assert cluster is not None
    if not cluster.serves(ELASTICJOB.api_version, ELASTICJOB.kind):
        raise ConfigError(f"{needed_by} (LAUNCHER=dlrover) needs the ElasticJob CRD ({ELASTICJOB.api_version}), "
                          "which this cluster does not serve: install DLRover's ElasticJob operator (its CRDs and "
                          "controller; each job's master runs in TRAINING_IMAGE, which needs the `dlrover[k8s]` "
                          "package, as the workloads image has) or choose another LAUNCHER")
    if cluster.get(CLUSTER_ROLE, MASTER_CLUSTER_ROLE) is not None:
        return
    if not cluster.allowed("create", "rbac.authorization.k8s.io", CLUSTER_ROLE.plural):
        raise ConfigError(f"{needed_by} (LAUNCHER=dlrover) binds each ElasticJob's master to the ClusterRole "
                          f"{MASTER_CLUSTER_ROLE}, which this cluster lacks: an administrator applies "
                          "manifests/rbac.yaml (it grants this account too)")
    (role,) = [obj for obj in rbac_objects("default", {}) if obj["kind"] == CLUSTER_ROLE.kind
               and obj["metadata"]["name"] == MASTER_CLUSTER_ROLE]
    say(session, f"{needed_by} (LAUNCHER=dlrover): the cluster lacks the ClusterRole {MASTER_CLUSTER_ROLE} "
        "its ElasticJobs' masters are bound to: creating it from manifests/rbac.yaml (kept)")
    cluster.apply(role)
