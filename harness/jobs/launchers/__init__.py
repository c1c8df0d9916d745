"""Launchers, one module per kind: how a workload is rendered onto the nodes, which object says it is done or failed,
where its ranks run, and what its pods and logs say after a failure. Pure: given a Workload and a
Placement (or the pods and logs already captured), no cluster access.

- torchrun: an Indexed Job (one pod per node, `torchrun --node-rank=$(JOB_COMPLETION_INDEX)`)
  plus a headless Service so worker 0 is reachable as <job>-0.<job>; no operator needed.
- mpi: an MPIJob v2beta1 (mpi-operator) in the shape of upstream's: `mpirun --tag-output` in the
  launcher, `-x` for every variable the ranks need, one worker per node running sshd; a failed
  launcher run is a retry of its Job, a lost worker or the Job's failure is explained from
  mpirun's log (harness.jobs.mpirun).
- per-node: a Job per node with its pod pinned there, running the command once (probes such as
  listing a node's GPUs).
- trainjob: a Kubeflow Trainer v2 TrainJob on the torch-distributed ClusterTrainingRuntime, run by
  Trainer as a JobSet of one Indexed Job (torchrun configured by Trainer's PET_* variables); the
  elastic test's TrainJob restarts its JobSet from a checkpoint kept on the nodes.
- shared-gpu: one Job of several pods pinned to one node, each asking for one GPU, all at once
  (TestTimeSlicing, TestMps: more pods than the node has GPUs, admitted only when they are shared).
- dlrover: a DLRover ElasticJob: DLRover's operator makes its master pod, the master makes a
  worker pod per node running dlrover-run (torchrun's variables from DLRover's rendezvous) and
  relaunches a lost one; the elastic test's ranks resume from a checkpoint kept on the nodes.
- daemonset: a DaemonSet on the nodes' type, its pods running a check and staying up (upstream's
  containerd check); done when a Ready pod runs on each selected node.

base.py holds what they share; LAUNCHERS names each by the LAUNCHER setting's value.
"""

from __future__ import annotations

from harness.jobs.launchers.base import Launcher, rank_locations
from harness.jobs.launchers.daemonset import DaemonSetCheck
from harness.jobs.launchers.dlrover import DLRover
from harness.jobs.launchers.mpi import Mpi
from harness.jobs.launchers.per_node import PerNode
from harness.jobs.launchers.shared_gpu import SharedGpu
from harness.jobs.launchers.torchrun import Torchrun
from harness.jobs.launchers.trainjob import TrainJob

__all__ = ["LAUNCHERS", "DLRover", "DaemonSetCheck", "Launcher", "Mpi", "PerNode", "SharedGpu", "Torchrun", "TrainJob",
           "rank_locations"]

LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher
                                  for launcher in (Torchrun(), Mpi(), TrainJob(), DLRover(), PerNode(), SharedGpu(),
                                                   DaemonSetCheck())}
