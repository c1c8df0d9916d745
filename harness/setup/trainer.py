"""What LAUNCHER=trainjob needs of the cluster, set up before a test's first TrainJob: Kubeflow
Trainer and JobSet when the cluster does not serve the TrainJob CRD (INSTALL_TRAINER, pinned
manifests/addons/{jobset,trainer}.yaml; only what the cluster lacks, removed after the last test on
every exit path, as mpi-operator), the TRAINJOB_RUNTIME ClusterTrainingRuntime when it is
torch-distributed and missing (manifests/addons/torch-distributed-runtime.yaml, removed after), and,
after an install, the admission webhooks answering: a Deployment Available is not yet a webhook that
serves, and a TrainJob created before it would be refused.
"""

from __future__ import annotations

import time

from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.resources import CLUSTER_TRAINING_RUNTIME, TRAINJOB, Obj
from harness.errors import ClusterError, ConfigError, WaitTimeout
from harness.framework.context import RunContext
from harness.setup.addons import JOBSET, TORCH_RUNTIME, TRAINER, ensure, say

# The runtime the suites ship (manifests/addons/torch-distributed-runtime.yaml); another
# TRAINJOB_RUNTIME must exist in the cluster.
SHIPPED_RUNTIME = "torch-distributed"
PROBE_NAME = "kubetest2-training-webhook-probe"
PROBE_NAMESPACE = "default"
# An admission webhook not serving yet (no endpoint, refused, timed out): worth another try.
NOT_SERVING = ("failed calling webhook", "connection refused", "no endpoints available", "context deadline exceeded")
RETRY_SECONDS = 0.5


def ensure_trainjob_api(session: RunContext, needed_by: str) -> None:
    """Trainer and JobSet (installed when the TrainJob CRD is missing and INSTALL_TRAINER allows,
    else a ConfigError naming the CRD), the runtime, and, after an install, their webhooks serving."""
    cluster, cfg = session.cluster, session.cfg
    assert cluster is not None
    api_version, kind = TRAINJOB.api_version, TRAINJOB.kind
    installed = False
    if not cluster.serves(api_version, kind):
        if not cfg.install_trainer:
            raise ConfigError(f"{needed_by} needs the {kind} CRD ({api_version}), which this cluster does not serve, "
                              "and INSTALL_TRAINER=false: install Kubeflow Trainer and JobSet or let the suite "
                              "install them")
        say(session, f"{needed_by} needs the {kind} CRD ({api_version}), which this cluster does not serve: "
            f"installing {JOBSET.name} {JOBSET.version} and {TRAINER.name} {TRAINER.version}")
        for addon in (JOBSET, TRAINER):
            ensure(session, addon, ())
        await_webhook(session, probe_jobset(), f"{JOBSET.name}'s admission webhook")
        installed = True
    runtime = cfg.trainjob_runtime
    if cluster.get(CLUSTER_TRAINING_RUNTIME, runtime) is None:
        if runtime != SHIPPED_RUNTIME:
            # Not ours to install: Trainer's admission refuses the TrainJob naming it, at once.
            say(session, f"the ClusterTrainingRuntime {runtime} (TRAINJOB_RUNTIME) does not exist in this cluster")
            return
        # Trainer's webhook admits runtimes too: it must answer before the runtime is created.
        await_webhook(session, probe_runtime(), f"{TRAINER.name}'s admission webhook")
        ensure(session, TORCH_RUNTIME, ())
    if installed:
        await_webhook(session, probe_trainjob(runtime), f"{TRAINER.name}'s admission webhook")


def await_webhook(session: RunContext, probe: Obj, what: str) -> None:
    """Until a dry-run create of `probe` is answered by the webhook (admitted or denied), within
    DISCOVERY_TIMEOUT; the last refusal in the timeout's message."""
    cluster, cfg = session.cluster, session.cfg
    assert cluster is not None
    started = time.monotonic()
    deadline = started + cfg.discovery_timeout
    while True:
        try:
            cluster.apply(probe, dry_run=True)
            break
        except ClusterError as exc:
            message = str(exc)
            if "denied the request" in message:
                break  # it serves: it judged the probe
            if not any(sign in message for sign in NOT_SERVING):
                raise
            if time.monotonic() >= deadline or session.cancel.is_set():
                raise WaitTimeout(f"TIMEOUT: {what} did not answer within {cfg.discovery_timeout:.0f}s (a dry-run "
                                  f"create of {probe['kind']} {probe['metadata']['name']}): {message}") from None
            time.sleep(RETRY_SECONDS)
    say(session, f"{what} answers ({time.monotonic() - started:.1f}s)")


def _probe(api_version: str, kind: str, spec: Obj, namespaced: bool = True) -> Obj:
    metadata: Obj = {"name": PROBE_NAME, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    if namespaced:
        metadata["namespace"] = PROBE_NAMESPACE
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def probe_trainjob(runtime: str) -> Obj:
    """A TrainJob on the runtime (dry run: Trainer's validating webhook judges it, nothing runs)."""
    return _probe(TRAINJOB.api_version, TRAINJOB.kind, {"runtimeRef": {"apiGroup": "trainer.kubeflow.org",
                                                 "kind": "ClusterTrainingRuntime", "name": runtime}})


def probe_runtime() -> Obj:
    """A ClusterTrainingRuntime (dry run) of one replicated job: Trainer's webhook judges it."""
    return _probe("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime",
                  {"template": {"spec": {"replicatedJobs": [_replicated_job()]}}}, namespaced=False)


def probe_jobset() -> Obj:
    """A JobSet of one replicated job (dry run): JobSet's mutating and validating webhooks judge it."""
    return _probe("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": [_replicated_job()]})


def _replicated_job() -> Obj:
    return {"name": "node", "template": {"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "node", "image": "probe"}]}}}}}
