"""torchrun: an Indexed Job (one pod per node, `torchrun --node-rank=$(JOB_COMPLETION_INDEX)`) plus a
headless Service so worker 0 is reachable as <job>-0.<job>; no operator needed. Elastic workloads
use c10d rendezvous with restarts, its store hosted by worker 0 (ELASTIC_ENTRY says why it is told so)."""

from __future__ import annotations

from harness.cluster.conditions import (
    job_failed,
    job_succeeded,
)
from harness.cluster.resources import JOB
from harness.cluster.wait import Condition
from harness.jobs.launchers.base import (
    MASTER_PORT,
    Launcher,
    container_env,
    worker_fields,
)
from harness.jobs.workload import Placement, Rendering, Workload

# An elastic worker's command: torchrun, told whether it hosts the c10d rendezvous store. Left to
# itself, torchrun guesses (torch's _matches_machine_hostname) by resolving the endpoint's host,
# `<job>-0.<job>`, through the cluster DNS and comparing it with its own addresses: in a pod that
# starts before the headless Service's record for worker 0 exists, worker 0 guesses "no", every
# worker waits for a store nobody serves, and the rendezvous times out (pytorch/pytorch#73380; on
# one machine, where every name is 127.0.0.1, every worker guessed "yes" instead). The index is the
# Indexed Job's, so worker 0, and only it, hosts; a shell because a pod template is the same for
# every index ($host, not $(host): the kubelet expands only $(NAME)).
ELASTIC_ENTRY = ('host=false; [ "$JOB_COMPLETION_INDEX" = 0 ] && host=true; '
                 'exec torchrun --rdzv-conf=is_host=$host "$@"')


class Torchrun(Launcher):
    name = "torchrun"
    owner = JOB

    def renderings(self, workload: Workload, placement: Placement) -> list[Rendering]:
        name = workload.job_name
        return [Rendering("torchrun-job.yaml", {
            **worker_fields(workload, placement),
            "Command": ["sh", "-c", ELASTIC_ENTRY, "torchrun"] if workload.elastic else ["torchrun"],
            "Args": torchrun_args(workload, placement),
            "Env": container_env(workload, placement, f"{name}-0.{name}"),
            "MasterPort": MASTER_PORT,
            # Elastic jobs survive a worker's loss through torchrun; others fail on the first pod.
            "BackoffLimit": placement.node_count * 2 if workload.elastic else 0,
            "ActiveDeadlineSeconds": max(60, int(placement.job_timeout) + 60),
        })]

    def succeeded(self, workload: Workload, placement: Placement) -> Condition:
        return job_succeeded(placement.namespace, workload.job_name)

    def failed(self, workload: Workload, placement: Placement) -> list[Condition]:
        return [job_failed(placement.namespace, workload.job_name)]


def torchrun_args(workload: Workload, placement: Placement) -> list[str]:
    """torchrun's arguments: static rendezvous on worker 0, or c10d with restarts when elastic."""
    nodes, per_node = placement.node_count, placement.processes_per_node
    if workload.elastic:
        launch = [f"--nnodes=1:{nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
                  f"--rdzv-endpoint=$(MASTER_ADDR):{MASTER_PORT}", f"--rdzv-id={workload.job_name}",
                  f"--max-restarts={workload.max_restarts}"]
    else:
        launch = [f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
                  "--node-rank=$(JOB_COMPLETION_INDEX)", "--master-addr=$(MASTER_ADDR)",
                  f"--master-port={MASTER_PORT}"]
    if workload.module is not None:
        return [*launch, "-m", workload.module, *workload.args]
    return [*launch, "--no-python", str(workload.binary), *workload.args]
