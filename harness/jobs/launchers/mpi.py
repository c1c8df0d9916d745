"""mpi: an MPIJob v2beta1 (mpi-operator) in the shape of upstream's: `mpirun --tag-output` in the
launcher, `-x` for every variable the ranks need, one worker per node running sshd; a failed
launcher run is a retry of its Job, a lost worker or the Job's failure is explained from mpirun's
log (harness.jobs.mpirun)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.cluster.conditions import (
    job_failed,
    mpi_worker_lost,
    mpijob_failed,
    mpijob_succeeded,
    pods_ended,
)
from harness.cluster.labels import job_selector
from harness.cluster.logs import CapturedLog
from harness.cluster.pods import pod_role
from harness.cluster.resources import MPIJOB, Obj
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import (
    Launcher,
    env_list,
    env_values,
    security_context,
    worker_fields,
)
from harness.jobs.mpirun import explain_failure as explain_mpirun_failure
from harness.jobs.mpirun import launcher_pods, launcher_runs
from harness.jobs.workload import Placement, Rendering, Workload

# The image's environment, forwarded to every rank on purpose besides the launcher's env (-x is
# the only way a variable reaches a rank: sshd gives the ranks neither the worker's env nor the
# launcher's). Every ENV of workloads/Dockerfile is here or in MPIRUN_LAUNCHER_ONLY
# (tests/unit/harness/jobs/test_mpi_environment.py holds the two to the Dockerfile). A name the image does not
# set (upstream's BERT image has no VIRTUAL_ENV) costs mpirun's one-line warning, nothing else.
MPIRUN_IMAGE_VARIABLES = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONUNBUFFERED", "LD_PRELOAD",
                          "HF_HUB_OFFLINE")
# The image's variables that are mpirun's own (read by the launcher, meaningless to a rank).
MPIRUN_LAUNCHER_ONLY = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
# OpenMPI's own traffic on a real cluster, as upstream's nccl-tests MPIJob: TCP over the pod network
# (not loopback, a docker bridge or the EKS pod-identity agent's veth_def_agent), and neither the cm
# PML (EFA's libfabric MTL is NCCL's; mpirun only bootstraps) nor UCX.
MPIRUN_MCA = (("pml", "^cm,ucx"), ("btl", "tcp,self"), ("btl_tcp_if_exclude", "lo,docker0,veth_def_agent"))
# aws-ofi-nccl's tuner, which upstream's nccl-tests MPIJob passes (`-x NCCL_TUNER_PLUGIN=...`) on EFA
# nodes. NCCL loads it when the image has it; when the file is absent NCCL logs that it could not
# find it and uses its internal tuner: so it is set whenever the job's nodes have EFA, unless the
# caller set NCCL_TUNER_PLUGIN (forwarded as given).
# The folder is where AWS's EFA installer puts the plugin (as in upstream's images); the EFA build of
# workloads/Dockerfile installs its own build there too, and checks the tuner is in it
# (tests/unit/harness/jobs/test_mpi_environment.py holds the two to the same path).
AWS_OFI_NCCL_LIB_DIR = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
AWS_OFI_NCCL_TUNER = f"{AWS_OFI_NCCL_LIB_DIR}/libnccl-ofi-tuner.so"
# Failed launcher runs its Job retries. Upstream's 20 absorbs a launcher that starts before its
# workers resolve; WaitForWorkersReady removes that race, and what is left (a DNS record lagging a
# Ready worker) needs one. More would rerun a deterministic failure (a rank that crashes) at the
# cost of a whole run each, behind the Job's growing back-off (10 s, 20 s, ...). Retries are
# reported, never hidden (launcher.runs, launcher.failed).
MPI_LAUNCHER_BACKOFF_LIMIT = 1


def mpi_master_addr(job_name: str) -> str:
    """Worker 0 under the headless Service mpi-operator names after the job."""
    return f"{job_name}-worker-0.{job_name}"


# What sshd, as mpi-operator's workers run it, needs of root; the ranks (its sessions) need none.
# Proven on this project's images (the MPIJob run over real sshd on real nodes).
SSHD_CAPABILITIES = (
    "NET_BIND_SERVICE",  # listens on port 22 (unless the runtime opens low ports to all)
    "SYS_CHROOT",  # privilege separation: the pre-auth child chroots to /run/sshd
    "SETUID",  # ... and drops to the sshd user; sessions run as the logged-in user
    "SETGID",  # ... with that user's groups (setgroups, initgroups)
    "KILL",  # the monitor (root) signals its unprivileged pre-auth child (LoginGraceTime)
    # Not CHOWN (only a pty is chowned to its user: mpirun's ssh asks none) nor AUDIT_WRITE (sshd
    # running as root carries on when the audit write is refused).
)


class Mpi(Launcher):
    name = "mpi"
    owner = MPIJOB
    needs_api = MPIJOB
    # -map-by slot: rank r on worker r // slots; a rank's hostname is its worker pod's name.
    places_ranks = True

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        env = env_values(workload, placement, mpi_master_addr(workload.job_name))
        if placement.efa_per_node and placement.accelerator == "nvidia":
            env.setdefault("NCCL_TUNER_PLUGIN", AWS_OFI_NCCL_TUNER)
        return [Rendering("mpijob.yaml", {
            **worker_fields(workload, placement),
            "SlotsPerWorker": placement.processes_per_node,
            "BackoffLimit": MPI_LAUNCHER_BACKOFF_LIMIT,
            "LauncherCommand": mpirun_command(workload, placement, env),
            "LauncherEnv": env_list(env),
            "WorkerSecurityContext": security_context(workload.image or placement.image, SSHD_CAPABILITIES),
        })]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return mpijob_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        """The MPIJob or its launcher's Job failed (retries exhausted), or a worker was lost."""
        namespace, name = placement.namespace, workload.job_name
        return [mpijob_failed(namespace, name), job_failed(namespace, f"{name}-launcher"),
                mpi_worker_lost(namespace, job_selector(name))]

    def retried(self, pod: Obj) -> bool:
        return pod_role(pod) == "launcher"

    def run_counts(self, pods: Iterable[Obj]) -> dict[str, int]:
        runs, failed = launcher_runs(pods)
        return {"launcher.runs": runs, "launcher.failed": failed}

    def awaited_after_failure(self, workload: Workload, placement: Placement, blamed: str | None,
                              pods: Mapping[str, Obj]) -> Condition | None:
        """A worker failed or was lost: mpirun is still noticing it; its words come as it exits."""
        if blamed is None or pod_role(pods.get(blamed, {})) != "worker":
            return None
        running = [pod["metadata"]["name"] for pod in launcher_pods(pods.values())
                   if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        return pods_ended(placement.namespace, job_selector(workload.job_name), running)

    def explain_failure(self, reason: str, pods: Mapping[str, Obj], captured: list[CapturedLog],
                        locations: Mapping[int, tuple[str, str]]) -> str | None:
        return explain_mpirun_failure(reason, pods, captured, locations)


def mpirun_command(workload: Workload, placement: Placement, env: Mapping[str, str]) -> list[str]:
    """The launcher's mpirun, as upstream's: one slot per process on every worker (rank r on
    worker r // slots), output tagged by rank, every variable of the launcher's env forwarded."""
    forwarded = dict.fromkeys((*MPIRUN_IMAGE_VARIABLES, *env))
    return ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(placement.world_size),
            "-bind-to", "none", "-map-by", "slot",
            *[arg for key, value in MPIRUN_MCA for arg in ("--mca", key, value)],
            *[arg for name in forwarded for arg in ("-x", name)], *workload.program()]
