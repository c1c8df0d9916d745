"""A job's life: launch (render for its launcher, apply), wait (failing fast), capture logs, read
metrics, and teardown (logs first, then events, the objects on failure, delete) on every path.
A job is any workload a test launches: a training run, a per-node probe (nvidia-smi), a DaemonSet
check (upstream's containerd check) alike.

Each phase's wall time is a JUnit property (`phase.<name>.seconds`: launch, pods_started, job,
log_capture, parse, verdict, teardown) and a log line, so a large run says where its time went."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.cluster.conditions import any_pod_failed, node_not_ready
from harness.cluster.labels import base_labels, job_labels, job_selector
from harness.cluster.logs import CapturedLog, Heading, capture_pod_logs, console_text, last_lines
from harness.cluster.manifests import dump_objects, render, save
from harness.cluster.pods import describe_pod, pod_role
from harness.cluster.resources import EVENT, POD, Obj
from harness.cluster.wait import Condition, wait_for
from harness.cluster.watch import ChangeCursor, ClusterState
from harness.config.settings import pod_environment_passthrough
from harness.config.topology import NodeInfo
from harness.errors import ClusterError, JobFailed, WaitTimeout
from harness.framework.context import TestContext
from harness.jobs import operator_logs
from harness.jobs.exit_after_training import explain as explain_exit
from harness.jobs.images import image
from harness.jobs.job_metrics import LogScans, job_metrics
from harness.jobs.launchers import LAUNCHERS, Launcher, rank_locations
from harness.jobs.no_gpu import explain_no_gpu
from harness.jobs.operator_logs import OperatorLogMark
from harness.jobs.workload import Placement, Rendering, Workload
from harness.metrics.records import WorkloadMetrics
from harness.report.junit import Outcome
from harness.report.results import event_entry
from harness.setup.namespaces import namespace_for
from harness.setup.operators import ensure_api

# How long a launcher still exiting after a failure (mpirun noticing a lost worker) is awaited
# for its last words before the logs are captured.
FAILURE_SETTLE_SECONDS = 15.0
# Bytes of each pod's log kept in the JUnit <system-out> (the full log is in logs/), head and
# tail, and the most all of a job's pods may take together: with many pods each gets an equal
# share (a quarter head, the rest tail), so 1,000 pods keep the file tens of MB, not 64 MB of logs.
JUNIT_LOG_HEAD = 16 * 1024
JUNIT_LOG_TAIL = 48 * 1024
JUNIT_LOGS_BUDGET = 16 * 1024 * 1024
# Trainer's webhook reads runtimes from its cache: one the job itself created just before its
# TrainJob (the elastic test's) may be refused as missing for a moment.
JUST_CREATED_RUNTIME = "must be created before the TrainJob is created"
ADMISSION_RETRY_SECONDS = 5.0


def efa_expected(t: TestContext, node_count: int) -> str | None:
    """Why a job of `node_count` nodes must use EFA (a multi-node job with --efaEnabled=true), or
    None. upstream's meaning: --efaEnabled=false (its default) judges nothing about EFA, even on
    nodes that advertise it (they are still used: efa_request)."""
    if node_count < 2 or not t.cfg.efa_enabled:
        return None
    if t.topology.efa_per_node > 0:
        return (f"EFA expected (--efaEnabled=true; {t.topology.efa_per_node} vpc.amazonaws.com/efa per node, "
                f"{node_count} nodes)")
    return f"EFA expected (--efaEnabled=true, {node_count} nodes)"


def efa_request(t: TestContext, nodes: Iterable[str]) -> int:
    """The EFA devices each pod of a job requests: EFA_PER_NODE when set (discovery checked that
    every node has them), else what the job's nodes advertise (allocatable vpc.amazonaws.com/efa,
    the fewest of them), as upstream requests what the node has. The type's table count would leave
    the workers of a node with fewer interfaces Pending; TestGPUCapacity names such a node."""
    if t.cfg.efa_per_node is not None or not t.topology.efa_per_node:
        return t.topology.efa_per_node
    names = set(nodes)
    return min((info.efa for info in t.topology.nodes if info.name in names), default=t.topology.efa_per_node)


def placement_for(t: TestContext, namespace: str, workload: Workload) -> Placement:
    """Where the workload runs: the topology's nodes (its first `workload.nodes` of them), the
    configuration's images, annotations and timeout."""
    topology, cfg = t.topology, t.cfg
    nodes = workload.on_nodes or (topology.node_names[: workload.nodes] if workload.nodes else topology.node_names)
    pod_env = pod_environment_passthrough()
    if efa_expected(t, len(nodes)):  # NCCL says which network it used (judged by assessment.check_efa_path)
        pod_env = {"NCCL_DEBUG": "INFO", **pod_env}
    return Placement(
        namespace=namespace, labels=job_labels(base_labels(cfg.run_id, t.name), workload.job_name),
        pod_annotations=cfg.pod_annotations, pod_env=pod_env,
        node_type=topology.node_type, node_names=nodes, processes_per_node=topology.gpus_per_node,
        efa_per_node=efa_request(t, nodes), accelerator=cfg.accelerator, image=cfg.training_image,
        job_timeout=workload.timeout or cfg.job_timeout, extra_tolerations=tuple(cfg.tolerations.as_pod_spec()),
        trainjob_runtime=cfg.trainjob_runtime, image_pull_policy=cfg.image_pull_policy,
        **smallest_allocatable(topology.nodes, nodes))


def smallest_allocatable(infos: Iterable[NodeInfo], names: Iterable[str]) -> dict[str, float]:
    """The least allocatable CPU and memory among the named nodes (0: unknown), for Placement."""
    chosen = [info for info in infos if info.name in set(names)]
    return {"node_allocatable_cpu": min((i.allocatable_cpu for i in chosen), default=0.0),
            "node_allocatable_memory": min((i.allocatable_memory for i in chosen), default=0.0)}


@dataclass
class Job:
    """One launched workload (training, probe or check); created by `launch(t, workload)`."""

    t: TestContext
    workload: Workload
    launcher: Launcher
    placement: Placement
    # Upstream's heading of the job's logs in the -test.v output.
    heading: Heading = Heading.TEST_LOG
    # The latest version of every pod seen while waiting (a deleted pod keeps its node for the report).
    pods_seen: dict[str, Obj] = field(default_factory=dict)
    _captured: list[CapturedLog] | None = None
    _retried_runs: set[str] = field(default_factory=set)  # failed runs already reported
    _pod_changes: ChangeCursor = field(default_factory=lambda: ChangeCursor("Pod"))
    # Each log's metric lines, scanned as it is captured (the parse overlaps the capture).
    _scans: LogScans = field(default_factory=LogScans)
    launched_at: float = field(default_factory=time.monotonic)
    # Worker pods (not an MPIJob's launcher) seen started, until all of them have.
    _started_pods: set[str] | None = field(default_factory=set)
    _parsed_at: float | None = None
    # Where the owner's operator's log stood at launch (harness.jobs.operator_logs), if it has one.
    operator_log: OperatorLogMark | None = None
    # The logs read as their pods ended (launchers whose controllers delete ended pods), by pod.
    _captured_early: dict[str, list[CapturedLog]] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.placement.namespace

    @property
    def selector(self) -> str:
        return job_selector(self.workload.job_name)

    @property
    def worker_selector(self) -> str:
        """The label selector of the job's pods that run ranks (not a DLRover master)."""
        return self.launcher.worker_selector(self.workload)

    @property
    def node_count(self) -> int:
        return self.placement.node_count

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    # -- waiting ---------------------------------------------------------------------------------

    def fails_on(self) -> list[Condition]:
        """What fails the job at once: its owner failing, a pod failing (not a run its owner
        retries), one of its nodes NotReady."""
        return [*self.launcher.failed(self.workload, self.placement),
                any_pod_failed(self.namespace, self.selector, self.t.cfg.pod_failure_grace, self.launcher.retried),
                node_not_ready(self.placement.node_names, self.namespace, self.selector)]

    def wait_succeeded(self) -> None:
        """Wait for success within JOB_TIMEOUT; a failed pod fails at once with its last lines (or
        the launcher's account of it); the owner's retried runs are reported either way."""
        started = time.monotonic()
        try:
            message = self.wait(self.launcher.succeeded(self.workload, self.placement))
        except JobFailed as exc:
            raise JobFailed(self._failure_message(exc), exc.pod) from None
        finally:
            self._report_runs()
        self.t.property("job.seconds", f"{time.monotonic() - started:.2f}")
        self.t.logf("%s after %.1fs", message, time.monotonic() - started)

    def note_phase(self, name: str, seconds: float) -> None:
        """A phase's wall time as the JUnit property phase.<name>.seconds."""
        self.t.property(f"phase.{name}.seconds", f"{seconds:.3f}")

    def _failure_message(self, exc: JobFailed) -> str:
        """The failure with what the logs say: the launcher's account (mpirun's words), else the
        blamed pod's last lines. A launcher still exiting is given a few seconds to say it."""
        settle = self.launcher.awaited_after_failure(self.workload, self.placement, exc.pod, self.pods_seen)
        if settle is not None:
            with contextlib.suppress(WaitTimeout):
                wait_for(self.t.cluster, settle, timeout=FAILURE_SETTLE_SECONDS, cancel=self.t.cancel,
                         on_event=self._remember_pods)
        captured = self.capture_logs()
        if (no_gpu := explain_no_gpu(str(exc), captured, exc.pod)) is not None:
            return f"{no_gpu}\n{last_lines(captured, exc.pod) if exc.pod else ''}".rstrip()
        locations = rank_locations(list(self.pods_seen.values()), self.placement.processes_per_node)
        explained = self.launcher.explain_failure(str(exc), self.pods_seen, captured, locations)
        if explained is not None:
            return explained
        message, tail = str(exc), ""
        if exc.pod:  # a rank that trained and then died on the way out is said to have done so
            blamed = [entry for entry in captured if entry.pod == exc.pod]
            message = explain_exit(message, blamed, self.pods_seen.get(exc.pod))
            tail = last_lines(captured, exc.pod)
        return f"{message}\n{tail}".rstrip()

    def _report_runs(self) -> None:
        """The owner's runs and failed runs (the MPI launcher's), as properties and, if any
        failed, a line: a retry that ended well is still reported."""
        counts = self.launcher.run_counts(self.pods_seen.values())
        for key, value in counts.items():
            self.t.property(key, value)
        if counts.get("launcher.failed"):
            line = (f"the launcher ran {counts['launcher.runs']} time(s), {counts['launcher.failed']} failed "
                    "(launcher.runs, launcher.failed): its Job runs a failed launcher again unless its "
                    "backoffLimit is spent")
            self.t.logf("%s", line)
            self.t.attach_output(line)

    def wait(self, condition: Condition, timeout: float | None = None) -> str:
        """Wait for a condition of this job (pods ready, a log line) while failing fast."""
        return wait_for(self.t.cluster, condition, fails_on=self.fails_on(),
                        timeout=self.placement.job_timeout if timeout is None else timeout,
                        cancel=self.t.cancel, on_event=self._remember_pods)

    def _remember_pods(self, state: ClusterState) -> None:
        """Keep the latest version of every pod seen, and say when a run its owner retries failed;
        only the pods changed since the last event are read."""
        changed, _ = self._pod_changes.changed(state)
        for key in changed:
            pod = state.get("Pod", *key)
            if pod is None:
                continue
            name = pod["metadata"]["name"]
            self.pods_seen[name] = pod
            self._note_started(name, pod)
            if (self.launcher.deletes_finished_pods and name not in self._captured_early
                    and pod.get("status", {}).get("phase") in ("Succeeded", "Failed")):
                self._captured_early[name] = capture_pod_logs(self.t.cluster, self.namespace, [pod],
                                                              self.t.artifacts_dir / "logs",
                                                              on_captured=self._scans.add)
            if (pod.get("status", {}).get("phase") == "Failed" and self.launcher.retried(pod)
                    and name not in self._retried_runs):
                self._retried_runs.add(name)
                self.t.logf("run %s failed (%s); its owner runs it again unless its retries (a Job's backoffLimit, "
                            "a JobSet's maxRestarts) are spent",
                            name, describe_pod(pod))

    def _note_started(self, name: str, pod: Obj) -> None:
        """Say once when every worker pod has started (scheduled, its containers run): the rest
        of the wait is the training itself."""
        if self._started_pods is None or pod_role(pod) == "launcher":
            return
        if pod.get("status", {}).get("phase") in ("Running", "Succeeded", "Failed"):
            self._started_pods.add(name)
        if len(self._started_pods) >= self.node_count:
            seconds = time.monotonic() - self.launched_at
            self.note_phase("pods_started", seconds)
            self.t.logf("all %d worker pods started %.1fs after launch", len(self._started_pods), seconds)
            self._started_pods = None

    # -- logs and metrics ------------------------------------------------------------------------

    def pods(self) -> list[Obj]:
        return self.t.cluster.list(POD, self.namespace, label_selector=self.selector).get("items", [])

    def capture_logs(self) -> list[CapturedLog]:
        """Capture every pod's logs once (before anything is deleted) and attach them to JUnit."""
        if self._captured is None:
            started = time.monotonic()
            pods = self.pods()
            self.pods_seen.update((pod["metadata"]["name"], pod) for pod in pods)
            logs_dir = self.t.artifacts_dir / "logs"
            early = [entry for entries in self._captured_early.values() for entry in entries]
            self._captured = early + capture_pod_logs(
                self.t.cluster, self.namespace, [p for p in pods if p["metadata"]["name"] not in self._captured_early],
                logs_dir, on_captured=self._scans.add)
            seconds, size = time.monotonic() - started, sum(entry.size for entry in self._captured)
            self.note_phase("log_capture", seconds)
            self.t.result_json.add_pods(self.pods_seen.values(), self._captured, self.t.artifacts_dir)
            self.t.property("pods.logs_captured", len(self._captured))
            self.t.property("logs.bytes", size)
            self.t.logf("captured %d logs (%.1f MiB) in %.2fs", len(self._captured), size / 2**20, seconds)
            self._show_excerpts(logs_dir)
        return self._captured

    def _show_excerpts(self, logs_dir: Path) -> None:
        """Every log's excerpt into <system-out> (and the console with -test.v), within
        JUNIT_LOGS_BUDGET for all of them, the cut stated first; each excerpt points at its file."""
        captured = self._captured or []
        share = min(JUNIT_LOG_HEAD + JUNIT_LOG_TAIL, JUNIT_LOGS_BUDGET // max(1, len(captured)))
        head = min(JUNIT_LOG_HEAD, share // 4)
        if share < JUNIT_LOG_HEAD + JUNIT_LOG_TAIL:
            self.t.attach_output(f"{len(captured)} logs: each cut to its first {head} and last {share - head} "
                                 f"bytes here ({JUNIT_LOGS_BUDGET // 2**20} MiB for all); full logs in {logs_dir}")
        for entry in captured:
            self.t.attach_output(entry.header + "\n" + entry.excerpt(head, share - head))
        self.t.print_verbose(console_text(captured, self.workload.job_name, self.heading, head, share - head,
                                          "    " * (self.t.depth + 1)))

    def metrics(self) -> WorkloadMetrics:
        """Metrics of every rank, each rank located on its pod and node."""
        captured = self.capture_logs()  # also remembers the pods it found
        started = time.monotonic()
        locations = rank_locations(list(self.pods_seen.values()), self.placement.processes_per_node)
        metrics = job_metrics(captured, locations, locations_win=self.launcher.places_ranks, scans=self._scans)
        self._scans = LogScans()  # combined now; at 8,000 ranks the scans held 90 MiB more
        self._parsed_at = time.monotonic()
        self.note_phase("parse", self._parsed_at - started)
        self.t.logf("parsed the metrics of %d ranks from %d logs in %.2fs", len(metrics.ranks), len(captured),
                    self._parsed_at - started)
        return metrics

    # -- teardown --------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Logs first (on every path), then events and, on failure, the objects; then delete."""
        started = time.monotonic()
        if self._parsed_at is not None:  # what ran between the parse and here: the checks
            self.note_phase("verdict", started - self._parsed_at)
        self.t.logf("teardown of %s", self.workload.job_name)
        self.capture_logs()
        if self.operator_log is not None:
            operator_logs.collect(self.t, self.operator_log, self.workload.job_name, self.namespace)
        self._save_events()
        self._save_made_by_controllers()
        if self.t.junit_case.outcome is not Outcome.PASS:
            self._save_objects()
        if not self.t.keeps_resources():
            for name in self.launcher.owners(self.workload, self.placement):
                self.t.cluster.delete(self.launcher.owner, name, self.namespace)
        self.note_phase("teardown", time.monotonic() - started)

    def _save_events(self) -> None:
        events = self.t.cluster.list(EVENT, self.namespace).get("items", [])
        self.t.result_json.events = [event_entry(e) for e in events]
        lines = [f"{e.get('lastTimestamp') or e.get('eventTime') or ''} {e.get('type', '')} "
                 f"{e.get('involvedObject', {}).get('kind', '')}/{e.get('involvedObject', {}).get('name', '')} "
                 f"{e.get('reason', '')}: {e.get('message', '')}" for e in events]
        (self.t.artifacts_dir / "events.txt").write_text("\n".join(lines) + "\n")

    def _made_by_controllers(self) -> list[Obj]:
        """The live objects the owner's controllers made (a TrainJob's JobSet and Jobs)."""
        return [obj for resource, selector in self.launcher.made_by_controllers(self.workload, self.placement)
                for obj in self.t.cluster.list(resource, self.namespace, label_selector=selector).get("items", [])]

    def _save_made_by_controllers(self) -> None:
        """Beside the rendered manifests, on every path: what the controllers made of them, as it
        is now (manifests/<owner kind>-made.yaml, e.g. trainjob-made.yaml: the JobSet, its Jobs)."""
        made = self._made_by_controllers()
        if made:
            save(self.t.artifacts_dir / "manifests", f"{self.launcher.owner.kind.lower()}-made.yaml", made)

    def _save_objects(self) -> None:
        owners = [self.t.cluster.get(self.launcher.owner, name, self.namespace)
                  for name in self.launcher.owners(self.workload, self.placement)]
        live = [obj for obj in (*owners, *self._made_by_controllers(), *self.pods()) if obj]
        (self.t.artifacts_dir / "objects.yaml").write_text(dump_objects(live))


def render_all(renderings: list[Rendering], save_to: Path) -> list[Obj]:
    """The objects of every rendering; saved (secrets redacted) one file per template."""
    by_template: dict[str, list[Obj]] = {}
    for rendering in renderings:
        objects = render(rendering.template, rendering.fields)
        if rendering.patch is not None:
            objects = [rendering.patch(obj) for obj in objects]
        by_template.setdefault(rendering.template, []).extend(objects)
    for template, objects in by_template.items():
        save(save_to, template, objects)
    return [obj for objects in by_template.values() for obj in objects]


def apply_workload(t: TestContext, obj: Obj) -> None:
    """Create one object of the job. The API server refusing it at admission (a webhook's denial: a
    TrainJob naming a runtime that does not exist) fails the test with the webhook's words; a
    runtime created a moment ago may not be in the webhook's cache yet: asked again, briefly."""
    deadline = time.monotonic() + ADMISSION_RETRY_SECONDS
    while True:
        try:
            t.cluster.apply(obj)
            return
        except ClusterError as exc:
            message = str(exc)
            if "denied the request" not in message:
                raise
            if JUST_CREATED_RUNTIME in message and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            meta = obj["metadata"]
            raise JobFailed(f"{obj['kind']} {meta['name']} was refused at admission: {message}") from None


def launch(t: TestContext, workload: Workload, heading: Heading = Heading.TEST_LOG,
           launcher: Launcher | None = None) -> Job:
    """Render and apply the workload for its launcher (`launcher`, else the one it names, else
    LAUNCHER's), the operator its launcher's API needs installed first when missing
    (harness.setup.operators); the job's teardown is registered before anything is applied."""
    started = time.monotonic()
    launcher = launcher or LAUNCHERS[workload.launcher or t.cfg.launcher]
    if workload.image is None:  # TRAINING_IMAGE's; the others were checked where the test named them
        image(t, "training_image")
    if launcher.needs_api is not None:
        ensure_api(t.session, launcher.needs_api, t.name)
    placement = placement_for(t, namespace_for(t), workload)
    objects = render_all(launcher.renderings(workload, placement), t.artifacts_dir / "manifests")
    job = Job(t, workload, launcher, placement, heading)
    if launcher.operator is not None:
        job.operator_log = operator_logs.mark(t, launcher.operator)
    t.property("launcher", launcher.name)
    t.cleanup(job.teardown, f"capture logs and delete {workload.job_name}")
    for obj in objects:
        apply_workload(t, obj)
    job.launched_at = time.monotonic()
    job.note_phase("launch", job.launched_at - started)
    t.logf("launched %s (%s launcher, %d nodes x %d processes, image %s) in namespace %s in %.2fs",
           workload.job_name, launcher.name, placement.node_count, placement.processes_per_node,
           workload.image or placement.image, placement.namespace, job.launched_at - started)
    return job
