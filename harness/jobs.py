"""A workload job's life: render for the configured launcher, apply, wait (failing fast),
capture logs, parse metrics, and tear down (logs first, then delete) on every path.

Launchers (LAUNCHER):
- torchrun: an Indexed Job (one pod per node, `torchrun --node-rank=$(JOB_COMPLETION_INDEX)`)
  plus a headless Service so worker 0 is reachable as <job>-0.<job>; no operator needed.
- mpi: an MPIJob v2beta1 (mpi-operator), `mpirun --tag-output` in the launcher, like upstream.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from harness.cluster import (
    EVENT,
    JOB,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MPIJOB,
    NAMESPACE,
    POD,
    RUN_ID_LABEL,
    TEST_LABEL,
    Cluster,
    Obj,
)
from harness.config import Config, pod_environment_passthrough
from harness.discovery import EFA_RESOURCE, GPU_RESOURCE
from harness.errors import ConfigError, JobFailed
from harness.logs import CapturedLog, capture_pod_logs, last_lines
from harness.manifests import dump_objects, render
from harness.metrics import WorkloadMetrics, combine, read_lines, scan_lines
from harness.testing import TestContext
from harness.wait import (
    ClusterState,
    Condition,
    any_pod_failed,
    job_failed,
    job_succeeded,
    mpijob_failed,
    mpijob_succeeded,
    node_not_ready,
    wait_for,
)

JOB_LABEL = "kubetest2-training/job"
MASTER_PORT = 29500
# Bytes of each pod's log kept in the JUnit <system-out> (the full log is in logs/).
JUNIT_LOG_HEAD = 16 * 1024
JUNIT_LOG_TAIL = 48 * 1024


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends."""
    return re.sub(r"[^A-Za-z0-9._-]", ".", text)[:63].strip("._-") or "x"


def test_namespace(t: TestContext) -> str:
    """The test's namespace: --namespace as given, else a new one per run and test, deleted after.

    Named kt2t-<run id>-<test>, so leftovers of an interrupted run are easy to find (and carry
    the managed-by label for `hack/cleanup`).
    """
    if t.namespace_name is not None:
        return t.namespace_name
    cfg = t.cfg
    if cfg.namespace is not None:
        t.namespace_name = cfg.namespace
        return cfg.namespace
    test = re.sub(r"[^a-z0-9]+", "-", t.name.lower()).strip("-")
    run = re.sub(r"[^a-z0-9]+", "", str(cfg.run_id).lower())[:8] or "run"
    name = f"kt2t-{run}-{test}"[:63].rstrip("-")
    t.cluster.ensure_namespace(name, base_labels(t))
    t.namespace_name = name
    if not cfg.keep_resources:
        def delete_namespace() -> None:
            t.cluster.delete(NAMESPACE, name)
            if not t.cluster.wait_deleted(NAMESPACE, name, None, timeout=120):
                t.logf("namespace %s still terminating after 120s; left to the API server", name)

        t.cleanup(delete_namespace, f"delete namespace {name}")
    else:
        t.cleanup(lambda: t.logf("KEEP_RESOURCES=true: namespace %s left in place", name),
                  "keep namespace")
    return name


def base_labels(t: TestContext) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: label_value(str(t.cfg.run_id)),
            TEST_LABEL: label_value(t.name)}


@dataclass(frozen=True)
class Workload:
    """What a job runs in every process: `python -m <module> <args>`, or `<binary> <args>`."""

    job_name: str
    module: str | None = None
    args: tuple[str, ...] = ()
    binary: str | None = None  # a non-Python program (nccl-tests' all_reduce_perf)
    # torchrun --nnodes=1:N with c10d rendezvous and restarts (elastic recovery).
    elastic: bool = False
    max_restarts: int = 0
    image: str | None = None  # default: TRAINING_IMAGE
    launcher: str | None = None  # default: LAUNCHER
    nodes: int | None = None  # default: NODE_COUNT (a single-node variant uses 1)
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.module is None) == (self.binary is None):
            raise ValueError(f"workload {self.job_name}: give exactly one of module or binary")

    def program(self) -> list[str]:
        """The per-process command line (what mpirun starts on every slot)."""
        if self.module is not None:
            return ["python", "-m", self.module, *self.args]
        return [str(self.binary), *self.args]


@dataclass
class PodLogs:
    """The logs of a group of pods, captured once (before anything is deleted) into the test's
    artifacts and JUnit <system-out>; `capture()` is idempotent so teardown can always call it."""

    t: TestContext
    namespace: str
    selector: str
    captured: list[CapturedLog] | None = None

    def capture(self, pods: list[Obj] | None = None) -> list[CapturedLog]:
        if self.captured is None:
            if pods is None:
                pods = self.t.cluster.list(POD, self.namespace, label_selector=self.selector).get("items", [])
            self.captured = capture_pod_logs(self.t.cluster, self.namespace, pods, self.t.artifacts_dir / "logs")
            for entry in self.captured:
                self.t.attach_output(entry.header + "\n" + entry.excerpt(JUNIT_LOG_HEAD, JUNIT_LOG_TAIL))
            self.t.property("pods.logs_captured", len(self.captured))
        return self.captured


@dataclass
class TrainingJob:
    """One launched workload; created by `launch(t, workload)`."""

    t: TestContext
    workload: Workload
    namespace: str
    objects: list[Obj] = field(default_factory=list)
    pods_seen: dict[str, Obj] = field(default_factory=dict)
    logs: PodLogs = field(init=False)
    _state_read: ClusterState | None = None
    _pods_read: int = 0

    def __post_init__(self) -> None:
        self.logs = PodLogs(self.t, self.namespace, self.selector)

    @property
    def selector(self) -> str:
        return f"{JOB_LABEL}={self.workload.job_name}"

    @property
    def launcher(self) -> str:
        return launcher_of(self.t, self.workload)

    @property
    def processes_per_node(self) -> int:
        return int(self.t.cfg.gpus_per_node)

    @property
    def node_count(self) -> int:
        return nodes_of(self.t, self.workload)

    @property
    def world_size(self) -> int:
        return self.node_count * self.processes_per_node

    # -- waiting ---------------------------------------------------------------------------------

    def _done_conditions(self) -> tuple[Condition, list[Condition]]:
        cfg, name, ns = self.t.cfg, self.workload.job_name, self.namespace
        if self.launcher == "mpi":
            done, failed = mpijob_succeeded(ns, name), mpijob_failed(ns, name)
        else:
            done, failed = job_succeeded(ns, name), job_failed(ns, name)
        fails_on = [failed, any_pod_failed(ns, self.selector, cfg.pod_failure_grace)]
        if self.t.nodes:
            fails_on.append(node_not_ready(n.name for n in self.t.nodes))
        return done, fails_on

    def wait_succeeded(self) -> None:
        """Wait for success within JOB_TIMEOUT; a failed pod fails at once with its last lines."""
        done, fails_on = self._done_conditions()
        started = time.monotonic()
        try:
            message = wait_for(self.t.cluster, done, fails_on=fails_on, timeout=self.t.cfg.job_timeout,
                               cancel=self.t.cancel, on_event=self._remember_pods)
        except JobFailed as exc:
            captured = self.capture_logs()
            tail = last_lines(captured, exc.pod) if exc.pod else ""
            raise JobFailed(f"{exc}\n{tail}".rstrip(), exc.pod) from None
        self.t.property("job.seconds", f"{time.monotonic() - started:.2f}")
        self.t.logf("%s after %.1fs", message, time.monotonic() - started)

    def wait(self, condition: Condition, timeout: float | None = None) -> str:
        """Wait for another condition (e.g. pods ready) while still failing fast."""
        _, fails_on = self._done_conditions()
        return wait_for(self.t.cluster, condition, fails_on=fails_on,
                        timeout=self.t.cfg.job_timeout if timeout is None else timeout,
                        cancel=self.t.cancel, on_event=self._remember_pods)

    def _remember_pods(self, state: ClusterState) -> None:
        """Keep the latest version of every pod seen (a deleted pod keeps its node for the report);
        only the pods changed since the last event are read."""
        if state is not self._state_read:
            self._state_read, self._pods_read = state, 0
        for key in state.changes_since("Pod", self._pods_read):
            pod = state.get("Pod", *key)
            if pod is not None:
                self.pods_seen[pod["metadata"]["name"]] = pod
        self._pods_read = state.generation("Pod")

    # -- logs and metrics ------------------------------------------------------------------------

    def pods(self) -> list[Obj]:
        return self.t.cluster.list(POD, self.namespace, label_selector=self.selector).get("items", [])

    def capture_logs(self) -> list[CapturedLog]:
        """Capture every pod's logs once (before anything is deleted) and attach them to JUnit."""
        if self.logs.captured is None:
            pods = self.pods()
            for pod in pods:
                self.pods_seen[pod["metadata"]["name"]] = pod
            return self.logs.capture(pods)
        return self.logs.captured

    def metrics(self) -> WorkloadMetrics:
        """Metrics of every rank, each rank located on its pod and node."""
        logs = [entry for entry in self.capture_logs() if not entry.previous and entry.path.exists()]
        parsed = combine([scan_lines(read_lines(entry.path), entry.pod) for entry in logs])
        locations = self.rank_locations()
        for rank in parsed.ranks:
            pod, node = locations.get(rank.rank, (None, None))
            rank.pod = rank.pod or pod
            rank.node = rank.node or node
        return parsed

    def report(self, metrics: WorkloadMetrics) -> None:
        """Metrics into JUnit properties: the aggregate of each, and every rank's value."""
        self.t.property("metrics.workload", metrics.workload)
        self.t.property("metrics.ranks", len(metrics.ranks))
        for key, summary in metrics.aggregate().items():
            for stat, value in summary.items():
                self.t.property(f"metrics.{key}.{stat}", f"{value:.6g}")
        for rank in sorted(metrics.ranks, key=lambda r: r.rank):
            for key, value in rank.values.items():
                if isinstance(value, (int, float, str)):
                    self.t.property(f"rank.{rank.rank}.{key}", value)
            self.t.property(f"rank.{rank.rank}.node", rank.node or "?")
        summary = metrics.aggregate()
        self.t.logf("metrics: %d ranks; %s", len(metrics.ranks), "; ".join(
            f"{k} median {v['median']:.4g} (min {v['min']:.4g}, max {v['max']:.4g})"
            for k, v in summary.items() if k not in ("rank", "world_size", "params_checksum")))

    def rank_locations(self) -> dict[int, tuple[str, str]]:
        """rank -> (pod, node): torchrun puts ranks [i*P, (i+1)*P) on index i; mpirun -map-by slot
        fills worker i's slots in order."""
        per_node = self.processes_per_node
        workers: dict[int, Obj] = {}
        for pod in self.pods_seen.values():
            meta = pod["metadata"]
            index = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
            if index is None:
                match = re.search(r"-worker-(\d+)$", meta["name"])
                index = match.group(1) if match else None
            if index is not None and not meta.get("deletionTimestamp"):
                workers[int(index)] = pod
        return {index * per_node + local: (pod["metadata"]["name"], pod.get("spec", {}).get("nodeName", "?"))
                for index, pod in workers.items() for local in range(per_node)}

    # -- teardown --------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Logs first (on every path), then events and, on failure, the objects; then delete."""
        self.capture_logs()
        events = self.t.cluster.list(EVENT, self.namespace).get("items", [])
        lines = [f"{e.get('lastTimestamp') or e.get('eventTime') or ''} {e.get('type', '')} "
                 f"{e.get('involvedObject', {}).get('kind', '')}/{e.get('involvedObject', {}).get('name', '')} "
                 f"{e.get('reason', '')}: {e.get('message', '')}" for e in events]
        (self.t.artifacts_dir / "events.txt").write_text("\n".join(lines) + "\n")
        if self.t.result.outcome.value != "PASS":
            self._save_objects()
        if not self.t.cfg.keep_resources:
            resource = MPIJOB if self.launcher == "mpi" else JOB
            self.t.cluster.delete(resource, self.workload.job_name, self.namespace)

    def _save_objects(self) -> None:
        resource = MPIJOB if self.launcher == "mpi" else JOB
        live = [self.t.cluster.get(resource, self.workload.job_name, self.namespace), *self.pods()]
        (self.t.artifacts_dir / "objects.yaml").write_text(dump_objects([obj for obj in live if obj]))


# ---------------------------------------------------------------------------------------------
# Rendering for each launcher


def _resources(t: TestContext, per_node: int) -> dict[str, Any]:
    cfg = t.cfg
    if cfg.accelerator == "cpu":
        return {"requests": {"cpu": str(per_node)}}
    limits: dict[str, Any] = {GPU_RESOURCE: per_node}
    if cfg.efa_per_node:
        limits[EFA_RESOURCE] = cfg.efa_per_node
    return {"limits": limits, "requests": dict(limits)}


def _env(t: TestContext, workload: Workload, master_addr: str) -> list[dict[str, Any]]:
    cfg = t.cfg
    values = {
        **pod_environment_passthrough(),
        "NUM_GPUS_PER_NODE": str(cfg.gpus_per_node),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(MASTER_PORT),
        "ACCELERATOR": str(cfg.accelerator),
        "PYTHONUNBUFFERED": "1",
        **({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if workload.elastic else {}),
        **workload.extra_env,
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    env += [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return env


def launcher_of(t: TestContext, workload: Workload) -> str:
    return workload.launcher or str(t.cfg.launcher)


def nodes_of(t: TestContext, workload: Workload) -> int:
    return workload.nodes or int(t.cfg.node_count)


def _torchrun_args(t: TestContext, workload: Workload) -> list[str]:
    nodes, per_node = nodes_of(t, workload), int(t.cfg.gpus_per_node)
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


def _mpirun_command(t: TestContext, workload: Workload) -> list[str]:
    np = nodes_of(t, workload) * int(t.cfg.gpus_per_node)
    forwarded = ["PATH", "LD_LIBRARY_PATH", "NCCL_DEBUG", "MASTER_ADDR", "MASTER_PORT",
                 "NUM_GPUS_PER_NODE", "ACCELERATOR", "PYTHONUNBUFFERED"]
    return ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(np), "-bind-to", "none",
            "-map-by", "slot", *[arg for name in forwarded for arg in ("-x", name)],
            *workload.program()]


def manifest_fields(t: TestContext, workload: Workload, namespace: str) -> tuple[str, dict[str, Any]]:
    """The template and its fields for the configured launcher."""
    cfg = t.cfg
    name = workload.job_name
    labels = {**base_labels(t), JOB_LABEL: label_value(name)}
    image = workload.image or cfg.training_image
    common: dict[str, Any] = {
        "JobName": name, "Namespace": namespace, "Labels": labels,
        "PodAnnotations": dict(cfg.pod_annotations), "TrainingImage": image,
        "WorkerReplicas": nodes_of(t, workload), "Resources": _resources(t, int(cfg.gpus_per_node)),
        "NodeSelector": {"node.kubernetes.io/instance-type": cfg.node_type},
    }
    if launcher_of(t, workload) == "mpi":
        return "mpijob.yaml", {
            **common,
            "SlotsPerWorker": int(cfg.gpus_per_node),
            "LauncherCommand": _mpirun_command(t, workload),
            "Env": _env(t, workload, f"{name}-worker-0.{name}-worker"),
        }
    return "torchrun-job.yaml", {
        **common,
        "Command": ["torchrun"],
        "Args": _torchrun_args(t, workload),
        "Env": _env(t, workload, f"{name}-0.{name}"),
        "MasterPort": MASTER_PORT,
        # Elastic jobs survive a worker's loss through torchrun; others fail on the first pod.
        "BackoffLimit": nodes_of(t, workload) * 2 if workload.elastic else 0,
        "ActiveDeadlineSeconds": max(60, int(cfg.job_timeout) + 60),
    }


def check_launcher(cluster: Cluster, cfg: Config) -> None:
    """Preflight: the configured launcher can run on this cluster (else exit 2, nothing created)."""
    if cfg.launcher == "mpi" and not cluster.serves("kubeflow.org/v2beta1", "MPIJob"):
        raise ConfigError("LAUNCHER=mpi needs the MPIJob CRD (kubeflow.org/v2beta1), which this cluster "
                          "does not serve: install mpi-operator or use LAUNCHER=torchrun")


def launch(t: TestContext, workload: Workload) -> TrainingJob:
    """Render and apply the workload for the configured launcher; teardown registered first."""
    namespace = test_namespace(t)
    template, fields = manifest_fields(t, workload, namespace)
    objects = render(template, fields, save_to=t.artifacts_dir / "manifests")
    job = TrainingJob(t, workload, namespace, objects)
    t.cleanup(job.teardown, f"capture logs and delete {workload.job_name}")
    for obj in objects:
        t.cluster.apply(obj)
    t.logf("launched %s (%s launcher, %d nodes x %d processes, image %s) in namespace %s",
           workload.job_name, job.launcher, job.node_count, t.cfg.gpus_per_node,
           fields["TrainingImage"], namespace)
    return job
