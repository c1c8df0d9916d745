"""The assessment of a job, the one way both test binaries judge what a job did: its metrics
recorded on the test (JUnit properties, the test's log), judged (the training verdict of
harness.verdict, the same code `python -m harness.verdict` runs offline, and any checks the test
adds), the verdict recorded (JUnit properties, the log, result.json), and the first failing check
fails the test."""

from __future__ import annotations

from collections.abc import Callable

from harness.cluster.pods import node_of, pod_role
from harness.framework.context import TestContext
from harness.jobs.job import Job, efa_expected
from harness.metrics.records import WorkloadMetrics, read_lines
from harness.report.results import MetricsMeta
from harness.verdict import baseline
from harness.verdict.bandwidth import BaselineKey
from harness.verdict.baseline import BASELINE_NODES
from harness.verdict.capacity import mark_emulated
from harness.verdict.checks import Check, Verdict
from harness.verdict.nccl_net import EFA_NCCL_NET, check_nccl_net, scan_nccl_net
from harness.verdict.nodes import MULTI_NODE, NODES, check_multi_node, check_nodes
from harness.verdict.training import (
    PARSE,
    TRAINING_KINDS,
    WORKLOADS,
    Expectation,
    check_parse,
    judge_training,
    workload_size,
)

# Not reported in the one-line summary: identities, not measurements.
UNSUMMARIZED = ("rank", "world_size", "local_rank", "restart_count", "params_checksum", "steps_requested",
                "steps_completed", "probe_matmul_n")


def record_metrics(t: TestContext, metrics: WorkloadMetrics) -> None:
    """Metrics into the test's JUnit properties, and a one-line summary into its log."""
    t.property("metrics.workload", metrics.workload)
    t.property("metrics.ranks", len(metrics.ranks))
    summary = metrics.aggregate()
    for key, stats in summary.items():
        for stat, value in stats.items():
            t.property(f"metrics.{key}.{stat}", f"{value:.6g}")
    for rank in sorted(metrics.ranks, key=lambda r: r.rank):
        for key, value in rank.values.items():
            if isinstance(value, int | float | str):
                t.property(f"rank.{rank.rank}.{key}", value)
        t.property(f"rank.{rank.rank}.node", rank.node or "?")
        t.property(f"rank.{rank.rank}.pod", rank.pod or "?")
    if metrics.sweep is not None and metrics.sweep.average is not None:
        t.property("metrics.busbw.average_gbps", metrics.sweep.average)  # a property only, never judged
    t.logf("metrics: %d ranks; %s", len(metrics.ranks), "; ".join(
        f"{k} median {v['median']:.4g} (min {v['min']:.4g}, max {v['max']:.4g})"
        for k, v in summary.items() if k not in UNSUMMARIZED))


def record_verdict(t: TestContext, verdict: Verdict, metrics: WorkloadMetrics | None = None,
                   meta: MetricsMeta | None = None) -> None:
    """Every check into the JUnit properties, the test's log and result.json; then the first failing
    check (if any) fails the test. Checks judged on emulated node capacity are marked so first."""
    if t.session.topology is not None:
        mark_emulated(verdict, t.session.topology)
    t.result_json.verdict.extend(verdict)
    if metrics is not None:
        t.result_json.metrics, t.result_json.meta = metrics, meta or t.result_json.meta
    for key, value in t.result_json.verdict.properties().items():
        t.property(key, value)
    for line in verdict.lines():
        t.logf("%s", line)
    t.logf("verdict: %s", t.result_json.verdict.summary())
    verdict.raise_if_failed()


def cluster_baseline(t: TestContext) -> baseline.Baseline | None:
    """BASELINE, read once per run (baseline.load caches it); None when unset."""
    return baseline.load_optional(t.cfg.baseline, t.cfg.baseline_tolerance)


def busbw_baseline(t: TestContext, metrics: WorkloadMetrics) -> BaselineKey | None:
    """What a sweep's bus bandwidth compares with in BASELINE: this workload's entry at this size."""
    return BaselineKey.of(cluster_baseline(t), metrics)


def training_verdict(t: TestContext, metrics: WorkloadMetrics, world_size: int, workload: str,
                     processes_per_node: int | None = None) -> tuple[Verdict, MetricsMeta]:
    """The training verdict of a job's metrics (harness.verdict.training.judge_training, as the offline
    `python -m harness.verdict` runs it) with this test's expectations, and how to read the metrics."""
    spec, cfg, node_type = WORKLOADS[workload], t.cfg, t.topology.node_type
    judged_by = cluster_baseline(t)
    expect = Expectation(t.name, spec, world_size, node_type, cfg.straggler_fraction, cfg.min_throughput_per_gpu,
                         accelerator=cfg.accelerator, processes_per_node=processes_per_node, baseline=judged_by)
    verdict = judge_training(metrics, expect)
    size = workload_size(metrics)
    if judged_by is not None:
        verdict.extend(baseline.judge_nodes(metrics, judged_by, node_type, size))
    if cfg.baseline_out is not None:
        baseline.append(cfg.baseline_out, baseline.entry_of(metrics, t.name, node_type, spec.throughput_key, size,
                                                            versions(), images(cfg)))
    return verdict, MetricsMeta(world_size, spec.throughput_key, spec.unit)


def versions() -> dict[str, str]:
    """What produced a baseline's figures: this harness's version and Python's."""
    import platform
    from importlib import metadata

    try:
        harness_version = metadata.version("kubetest2-training")
    except metadata.PackageNotFoundError:
        harness_version = "unknown (not installed as a package)"
    return {"kubetest2-training": harness_version, "python": platform.python_version()}


def images(cfg: object) -> dict[str, str]:
    """Every image setting's value (the workloads' images) for a baseline entry."""
    return {name: str(value) for name, value in vars(cfg).items() if name.endswith("_image") and value}


def check_efa_path(t: TestContext, job: Job) -> Check | None:
    """With EFA expected on a multi-node job: every host's NCCL used EFA, not sockets (None: not expected)."""
    why = efa_expected(t, job.node_count)
    if why is None:
        return None
    node_of_host: dict[str, str] = {}
    for name, pod in job.pods_seen.items():
        node = pod.get("spec", {}).get("nodeName") or "?"
        node_of_host[name] = node
        if hostname := pod.get("spec", {}).get("hostname"):
            node_of_host[hostname] = node
    logs = [(e.pod, e.node, read_lines(e.path)) for e in job.capture_logs() if not e.previous and e.path.exists()]
    # pod_env's NCCL_DEBUG: INFO (set for this check) unless the user set another level
    return check_nccl_net(scan_nccl_net(logs, node_of_host), why, job.placement.pod_env.get("NCCL_DEBUG"),
                          job.placement.node_names)


# What `assess` judges with a workload (the nodes first, the EFA path and the baseline when they
# apply), and without one: the kinds the tests that call it declare (docs/TESTS.md).
ASSESSED_TRAINING = (NODES, MULTI_NODE, *TRAINING_KINDS, BASELINE_NODES, EFA_NCCL_NET)
ASSESSED_PARSE = (PARSE,)


def assess(t: TestContext, job: Job, workload: str | None = None,
           more: Callable[[WorkloadMetrics], Verdict] | None = None) -> WorkloadMetrics:
    """Assess a job that has ended: its metrics read and recorded on the test, judged, and the
    verdict recorded; the first failing check fails the test. `workload` names the training verdict
    to judge by (harness.verdict.training.WORKLOADS); without one only the parse is checked (a
    program of another project's, nccl-tests say). `more` adds the test's own checks on the metrics
    (bus bandwidth, the EFA path). Returns the metrics, for what the test does next."""
    metrics = job.metrics()
    record_metrics(t, metrics)
    if workload is None:
        verdict, meta = Verdict([check_parse(metrics)]), None
    else:
        verdict, meta = training_verdict(t, metrics, job.world_size, workload,
                                         job.placement.processes_per_node)
        # First: a node missing from the run explains a short or single-node job before any figure does.
        workers = [node_of(pod) for pod in job.pods_seen.values() if pod_role(pod) != "launcher"]
        verdict.checks[:0] = [check_nodes(t.topology), check_multi_node(t.topology, workers)]
        if (efa := check_efa_path(t, job)) is not None:
            verdict.add(efa)
    if more is not None:
        verdict.extend(more(metrics))
    record_verdict(t, verdict, metrics, meta)
    return metrics
