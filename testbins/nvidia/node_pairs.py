"""TestNodePairs (this project's): all-reduce between pairs of nodes in two passes; the slow node named."""

from __future__ import annotations

from harness.errors import TestFailure
from harness.framework.context import TestContext
from harness.framework.suite import TestFunc
from harness.jobs.assessment import record_verdict
from harness.jobs.images import image
from harness.jobs.job import launch
from harness.jobs.workload import Workload
from harness.verdict.checks import Check, Verdict, declare
from harness.verdict.node_pairs import Group, NodeResult, Plan, judge, plan
from testbins.nvidia.common import NCCL_TESTS_DIR

NODE_PAIRS = declare(
    "node_pairs",
    "`TestNodePairs/<node>`: the node's pair was slow (below `STRAGGLER_FRACTION` x the pass's upper quartile) in "
    "both passes, with different partners",
    "`STRAGGLER_FRACTION` x the pass's upper quartile",
    settings=("STRAGGLER_FRACTION",),
)

PAIR_SECONDS = 3
PAIR_BYTES = "16M"


def pair_workload(t: TestContext, job_name: str, nodes: Group) -> Workload:
    """One group's all-reduce: nccl-tests all_reduce_perf on GPUs (MPIJob), the project's
    workloads.allreduce on CPU (torchrun, gloo), on exactly these nodes."""
    if t.cfg.accelerator == "cpu":
        # One size, timed for PAIR_SECONDS: a pair's window spans many of a time-shared CPU's
        # periods (and a slowed node's stops), where tiny's 5 iterations of a millisecond fall between.
        # 16 MiB fills the loopback socket buffers, so a stopped node holds its partner up too.
        args = ("--size", "tiny", "-b", PAIR_BYTES, "-e", PAIR_BYTES, "--seconds", str(PAIR_SECONDS))
        return Workload(job_name, "workloads.allreduce", args, on_nodes=nodes)
    return Workload(job_name, binary=f"{NCCL_TESTS_DIR}/all_reduce_perf",
                    args=("-b", "8", "-e", "1G", "-f", "2", "-c", "1", "-n", "10"), image=image(t, "nccl_tests_image"),
                    launcher="mpi", on_nodes=nodes, extra_env={"NCCL_DEBUG": "WARN"})


def run_pass(t: TestContext, number: int, groups: tuple[Group, ...]) -> dict[Group, float | None]:
    """Every group of a pass at once; each group's bus bandwidth at its sweep's largest message
    (the lower of out-of-place and in-place), None when the job failed or printed no table."""
    jobs = [(group, launch(t, pair_workload(t, f"node-pairs-{number}-{i}", group))) for i, group in enumerate(groups)]
    figures: dict[Group, float | None] = {}
    for group, job in jobs:
        try:
            job.wait_succeeded()
            sweep = job.metrics().sweep
        except TestFailure as exc:
            t.logf("pass %d %s: %s", number, ", ".join(group), exc)
            figures[group] = None
            continue
        if sweep is None or not sweep.rows:
            figures[group] = None
            continue
        row = max(sweep.rows, key=lambda r: r.size)
        figures[group] = min(h.busbw for h in (row.out_of_place, row.in_place) if h is not None)
        t.logf("pass %d %s: %.4g GB/s at %d bytes", number, ", ".join(group), figures[group], row.size)
    return figures


def node_case(result: NodeResult) -> TestFunc:
    """TestNodePairs/<node>: the node's figures and partners in both passes; fails when it was slow in both."""

    def run(t: TestContext) -> None:
        for i in (0, 1):
            t.property(f"pass{i + 1}.partners", ",".join(result.partners[i]))
            t.property(f"pass{i + 1}.busbw_gbps", "none" if result.figures[i] is None else f"{result.figures[i]:.6g}")
            t.property(f"pass{i + 1}.threshold_gbps", f"{result.thresholds[i]:.6g}")
            t.property(f"pass{i + 1}.slow", str(result.slow[i]).lower())
        check = (Check.failed if result.failed else Check.passed)("node_pairs", result.message())
        record_verdict(t, Verdict([check]))

    return run


def test_node_pairs(t: TestContext) -> None:
    """All-reduce between pairs of nodes, every pair of a pass at once, in two passes with different
    partners (harness/verdict/node_pairs.py); one subtest per node, TestNodePairs/<node>: a node
    slow in both passes fails, any other passes."""
    nodes = list(t.topology.node_names)
    if len(nodes) < 2:
        t.skip(f"{len(nodes)} node: TestNodePairs needs at least 2")
    the_plan = plan(nodes)
    for a, b in the_plan.inseparable:
        t.logf("%s and %s share a group in both passes (%d nodes): they cannot be told apart", a, b, len(nodes))
    # Setup: both passes (the second starts when the first has ended); the assessment judges them.
    figures = [run_pass(t, number, groups) for number, groups in enumerate(the_plan.passes, start=1)]
    t.assessment("the slow node named", lambda: name_the_slow_node(t, the_plan, figures))


def name_the_slow_node(t: TestContext, the_plan: Plan, figures: list[dict[Group, float | None]]) -> None:
    """The assessment: each node judged on both passes' figures, one subtest per node."""
    results = judge(the_plan, figures, t.cfg.straggler_fraction)
    t.result_json.verdict.references["node_pairs"] = {
        "passes": [[{"nodes": list(g), "busbw_gbps": figures[p].get(g)} for g in groups]
                   for p, groups in enumerate(the_plan.passes)],
        "nodes": {r.node: {"partners": [list(x) for x in r.partners], "busbw_gbps": list(r.figures),
                           "thresholds": list(r.thresholds), "slow": list(r.slow), "failed": r.failed}
                  for r in results}}
    for result in results:
        t.run(result.node, node_case(result))


