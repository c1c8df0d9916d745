"""e2e-nvidia: GPU and interconnect suites (drop-in for the upstream Go binary)."""

from __future__ import annotations

import re
import sys

from harness.cluster import POD
from harness.errors import HarnessError, TestFailure, ThresholdMissed
from harness.jobs import JOB_LABEL, PodLogs, Workload, base_labels, launch, test_namespace
from harness.manifests import render
from harness.metrics import read_lines
from harness.runner import Suite
from harness.runner import main as run_suite
from harness.testing import TestCase, TestContext
from harness.verdict import check_all_ranks_reported, thresholds_for
from harness.wait import ClusterState, Condition, Watched, any_pod_failed, wait_for

# nccl-tests check (REFERENCE section 3): fails below 0.9 x the expected bus bandwidth.
BUSBW_TOLERANCE = 0.9
# With EFA on RDMA-capable instance types NCCL must use Libfabric with GPUDirect RDMA.
EFA_GDRDMA = re.compile(r"\[send\] via NET/.*Libfabric/.*/GDRDMA")
RDMA_CAPABLE_TYPES = re.compile(r"^(p4d|p4de|p5|p5e|p5en|p6-b200|trn1|trn1n|trn2)\.")
NCCL_TESTS_BINARY = "/opt/nccl-tests/build/all_reduce_perf"


def expected_busbw(t: TestContext) -> tuple[float | None, str]:
    if t.cfg.min_busbw is not None:
        return t.cfg.min_busbw, "NCCL_TESTS_MIN_BW"
    return thresholds_for(t.cfg.node_type).busbw_gbps, f"{t.cfg.node_type} table"


def check_busbw(t: TestContext, measured: float | None) -> None:
    expected, source = expected_busbw(t)
    if measured is None:
        raise TestFailure("nccl: no '# Avg bus bandwidth' in the logs")
    t.property("busbw.expected_gbps", expected if expected is not None else "none")
    if expected is not None and measured < BUSBW_TOLERANCE * expected:
        raise ThresholdMissed(f"threshold: average bus bandwidth {measured:.2f} GB/s, expected >= "
                              f"{BUSBW_TOLERANCE * expected:.2f} GB/s (0.9 x {expected:g} from {source})")


def test_nccl_allreduce(t: TestContext) -> None:
    """torch.distributed all-reduce sweep across all nodes and GPUs; bus bandwidth checked."""
    size = "tiny" if t.cfg.accelerator == "cpu" else "default"
    job = launch(t, Workload("nccl-allreduce", "workloads.allreduce", ("--size", size)))
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    check_all_ranks_reported(metrics, job.world_size)
    busbw = [r.values["busbw_avg"] for r in metrics.ranks if r.values.get("busbw_avg") is not None]
    check_busbw(t, min(busbw) if busbw else None)


def nccl_tests(t: TestContext, nodes: int) -> None:
    """nccl-tests all_reduce_perf in an MPIJob, like upstream; EFA path checked where it applies."""
    max_bytes = "2G" if nodes == 1 else "16G"
    efa = bool(t.cfg.efa_per_node)
    workload = Workload(
        f"nccl-tests-{nodes}n", binary=NCCL_TESTS_BINARY,
        args=("-b", "8", "-e", max_bytes, "-f", "2", "-c", "1", "-n", "10"),
        image=t.cfg.nccl_tests_image, launcher="mpi", nodes=nodes,
        extra_env={"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": str(8 * 1024 * 1024),
                   **({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"} if efa else {})})
    job = launch(t, workload)
    job.wait_succeeded()
    metrics = job.metrics()
    job.report(metrics)
    values = metrics.ranks[0].values
    if values.get("out_of_bounds"):
        raise TestFailure(f"nccl-tests: {values['out_of_bounds']} out-of-bounds values (wrong results)")
    check_busbw(t, values.get("busbw_avg"))
    if efa and RDMA_CAPABLE_TYPES.match(str(t.cfg.node_type)):
        # Line by line: joining every log into one string held all of them in memory at once.
        logs = [e for e in job.capture_logs() if not e.previous and e.path.exists()]
        if not any(EFA_GDRDMA.search(line) for e in logs for line in read_lines(e.path)):
            raise TestFailure(f"nccl-tests: EFA is enabled on {t.cfg.node_type} but NCCL did not use "
                              f"Libfabric with GPUDirect RDMA: no line matches {EFA_GDRDMA.pattern!r}")
        t.property("efa.gdrdma", "true")


def test_nccl_tests(t: TestContext) -> None:
    """nccl-tests all_reduce_perf on one node and across all nodes (subtests like upstream)."""
    if t.cfg.accelerator == "cpu":
        t.skip("nccl-tests needs NVIDIA GPUs (ACCELERATOR=cpu)")
    if not t.cluster.serves("kubeflow.org/v2beta1", "MPIJob"):
        raise HarnessError("TestNCCLTests needs the MPIJob CRD (kubeflow.org/v2beta1): install mpi-operator, "
                           "or exclude it with -test.run")
    t.run("single-node", lambda sub: nccl_tests(sub, 1))

    def multi_node(sub: TestContext) -> None:
        if sub.cfg.node_count < 2:
            sub.skip("one node: the multi-node variant needs at least 2")
        nccl_tests(sub, int(sub.cfg.node_count))

    t.run("multi-node", multi_node)


GPU_LINE = re.compile(r"^GPU \d+: ", re.MULTILINE)


def test_gpu_capacity(t: TestContext) -> None:
    """Every node advertises the expected GPUs, and a pod on each node sees them all."""
    if t.cfg.accelerator == "cpu":
        t.skip("no GPUs to check with ACCELERATOR=cpu")
    expected = int(t.cfg.gpus_per_node)
    short = [f"{n.name} ({n.gpus})" for n in t.nodes if n.gpus < expected]
    if short:
        raise TestFailure(f"capacity: nodes advertise fewer than {expected} nvidia.com/gpu: {', '.join(short)}")
    namespace = test_namespace(t)
    selector = f"{JOB_LABEL}=gpu-capacity"
    logs = PodLogs(t, namespace, selector)
    t.cleanup(logs.capture, "capture the gpu-capacity pods' logs")
    for node in t.nodes:
        for obj in render("gpu-capacity-job.yaml", {
            "JobName": f"gpu-capacity-{node.name}"[:63].rstrip("-."), "Namespace": namespace,
            "Labels": {**base_labels(t), JOB_LABEL: "gpu-capacity"},
            "PodAnnotations": dict(t.cfg.pod_annotations), "NCCLTestsImage": t.cfg.nccl_tests_image,
            "NodeName": node.name, "GPUPerNode": expected,
        }, save_to=t.artifacts_dir / "manifests"):
            t.cluster.apply(obj)

    def all_succeeded(state: ClusterState, _now: float) -> str | None:
        done = [p for p in state.of_kind("Pod") if p.get("status", {}).get("phase") == "Succeeded"]
        return f"{len(done)} pods listed their GPUs" if len(done) >= len(t.nodes) else None

    wait_for(t.cluster, Condition(f"{len(t.nodes)} gpu-capacity pods to succeed",
                                  (Watched(POD, namespace, selector),), all_succeeded),
             fails_on=[any_pod_failed(namespace, selector, t.cfg.pod_failure_grace)],
             timeout=t.cfg.job_timeout, cancel=t.cancel)
    problems = []
    for entry in logs.capture():
        seen = len(GPU_LINE.findall(entry.path.read_text(errors="replace")))
        t.property(f"node.{entry.node}.gpus_seen", seen)
        if seen != expected:
            problems.append(f"pod {entry.pod} on node {entry.node} sees {seen} GPUs, expected {expected}")
    if problems:
        raise TestFailure("capacity: " + "; ".join(problems))


SUITE = Suite(
    binary="e2e-nvidia",
    summary="GPU and interconnect checks: all-reduce bandwidth through torch.distributed and "
            "nccl-tests, and the GPUs every node advertises are usable from pods.",
    tests=(
        TestCase("TestNCCLAllReduce", test_nccl_allreduce),
        TestCase("TestNCCLTests", test_nccl_tests, subtests=("single-node", "multi-node")),
        TestCase("TestGPUCapacity", test_gpu_capacity),
    ),
)


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
