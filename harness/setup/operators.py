"""The operators a launcher's API needs, installed when the cluster lacks them: mpi-operator for the
MPIJob CRD (INSTALL_MPI_OPERATOR), Kubeflow Trainer and JobSet for the TrainJob CRD (INSTALL_TRAINER,
harness/setup/trainer.py); else a ConfigError naming what is missing. Called before a test's job is
launched (harness.jobs.job.launch), so only the APIs the selected tests use are installed.
"""

from __future__ import annotations

from harness.cluster.resources import TRAINJOB, Resource
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
    if cluster.serves(api.api_version, api.kind):
        return
    if not session.cfg.install_mpi_operator:
        raise ConfigError(f"{needed_by} needs the {api.kind} CRD ({api.api_version}), which this cluster does not "
                          "serve, and INSTALL_MPI_OPERATOR=false: install mpi-operator or let the suite install it")
    say(session, f"{needed_by} needs the {api.kind} CRD ({api.api_version}), which this cluster does not serve: "
        f"installing {MPI_OPERATOR.name} {MPI_OPERATOR.version}")
    ensure(session, MPI_OPERATOR, ())
