"""Canned-log sets (localcluster/emulation/canned_logs/<set>/): the node agent picks a pod's log by its job and
container, and the nvidia-suite set holds what each test of the nvidia suite parses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.metrics.records import combine, scan_file, scan_lines
from harness.verdict.rejudge import run as verdict_main
from localcluster.emulation.canned_pods import CannedPods
from testbins.nvidia import containerd, mpi, unit

CANNED = Path(__file__).resolve().parents[3] / "localcluster" / "emulation" / "canned_logs"
NVIDIA_SUITE = CANNED / "nvidia-suite"


def lines_of(job: str, container: str) -> list[str]:
    pods = CannedPods(api=None, files=None, canned_logs_dir=CANNED, default_canned_log="bert-mpirun-32ranks")  # type: ignore[arg-type]
    pod = {"metadata": {"name": f"{job}-0", "annotations": {"kubetest2-training.local/canned-log": "nvidia-suite"},
                        "labels": {"kubetest2-training/job": job}}}
    return pods.lines(pod, container)


def test_a_set_serves_the_job_and_container_then_the_job_then_its_default():
    assert CannedPods.log_of_set(NVIDIA_SUITE, "multi-node-alltoall-perf", "launcher").name == \
        "multi-node-alltoall-perf.launcher.log"
    assert CannedPods.log_of_set(NVIDIA_SUITE, "multi-node-alltoall-perf", "worker").name == "default.log"
    assert CannedPods.log_of_set(NVIDIA_SUITE, "unit-test-job", "probe").name == "unit-test-job.log"
    assert lines_of("unit-test-job", "probe")[0].startswith("# CANNED OUTPUT")


def test_every_canned_file_of_the_set_says_it_is_canned_or_is_a_known_fixture():
    for path in NVIDIA_SUITE.iterdir():
        first = path.read_text().splitlines()[0]
        assert path.is_symlink() or first.startswith("# CANNED OUTPUT"), path.name


def test_the_nccl_tables_parse_for_every_collective():
    for job in ("multi-node-all-reduce-perf", "multi-node-all-gather-perf", "multi-node-alltoall-perf"):
        sweep = combine([scan_lines(lines_of(job, "launcher"), job)]).sweep
        assert sweep is not None and sweep.average is not None and sweep.average > 0
        assert sweep.out_of_bounds == 0 and sweep.max_size == 16 * 2**30
        assert all(row.out_of_place.busbw > 0 for row in sweep.rows if row.size >= 2**20)
        assert any(mpi.EFA_GDRDMA.search(line) for line in lines_of(job, "launcher"))


def test_the_unit_test_hpl_and_mnist_lines_match_what_the_tests_read():
    tap = [m for m in map(unit.TAP_LINE.match, lines_of("unit-test-job", "probe")) if m]
    assert len(tap) == 9 and sum(1 for m in tap if m["skip"]) == 1
    hpl = lines_of("hpc-benckmarks-job", "probe")
    assert any(unit.HPL_RESULT.match(line) for line in hpl)
    assert any(unit.HPL_CHECK.search(line)["verdict"] == "PASSED" for line in hpl if "Ax-b" in line)
    assert any(mpi.MNIST_TEST_LINE.search(line) for line in lines_of("pytorch-training-single-node", "probe"))
    assert containerd.CONTAINERD_PASSED in lines_of("containerd-check", "check")


# ---- canned GPU training logs (hack/canned_gpu_logs.py): every workload, per shape, healthy and straggler ----

TRAINING = {"bert": "TestBertTraining", "nanogpt": "TestNanoGPTTraining", "mnist": "TestMNISTTraining"}
SHAPES = {"p5": ("p5.48xlarge", "NVIDIA H100 80GB HBM3"), "p3": ("p3.16xlarge", "Tesla V100-SXM2-16GB")}
GPU_LOG_RANKS = 16  # 2 pods (nodes) of 8 ranks


def gpu_logs(workload: str, shape: str, variant: str) -> list[Path]:
    """The pods' logs, as the node agent serves `<workload>-<shape>-<variant>-{index}` to pods 0 and 1."""
    pods = CannedPods(api=None, files=None, canned_logs_dir=CANNED, default_canned_log="bert-mpirun-32ranks")  # type: ignore[arg-type]
    paths = []
    for index in ("0", "1"):
        annotations = {"kubetest2-training.local/canned-log": f"{workload}-{shape}-{variant}-{{index}}",
                       "batch.kubernetes.io/job-completion-index": index}
        pod = {"metadata": {"name": f"{workload}-training-{index}", "annotations": annotations}}
        lines = pods.lines(pod, "worker")
        path = CANNED / f"{workload}-{shape}-{variant}-{index}.log"
        assert lines == path.read_text().splitlines(), f"{path.name}: not what the node agent serves pod {index}"
        paths.append(path)
    return paths


@pytest.mark.parametrize("variant", ["healthy", "straggler"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("workload", sorted(TRAINING))
def test_canned_gpu_logs_parse_with_every_rank_on_cuda(workload, shape, variant):
    paths = gpu_logs(workload, shape, variant)
    for path in paths:
        assert path.read_text().startswith("# CANNED OUTPUT for the local cluster"), path.name
    metrics = combine([scan_file(p) for p in paths])
    assert (metrics.workload, metrics.problem_count) == (workload, 0)
    assert sorted(r.rank for r in metrics.ranks) == list(range(GPU_LOG_RANKS))
    gpu_name = SHAPES[shape][1]
    for rank in metrics.ranks:
        v = rank.values
        assert (v["device"], v["backend"], v["device_requested"]) == (f"cuda:{rank.rank % 8}", "nccl", "cuda")
        assert (v["gpus_visible"], v["gpus_per_node"], v["local_world_size"], v["gpu_name"]) == (8, 8, 8, gpu_name)
        assert v["compute_steps"] >= 3 and v["compute_seconds"] >= 2.0 and v["compute_ms_per_step"] > 0
        assert rank.node == f"kwok-{shape}-{rank.rank // 8}"


def test_the_metrics_command_reads_every_rank_of_a_canned_gpu_log():
    proc = subprocess.run([sys.executable, "-m", "harness.metrics", *map(str, gpu_logs("nanogpt", "p5", "healthy"))],
                          capture_output=True, text=True, check=False, cwd=CANNED.parents[1])
    assert proc.returncode == 0, proc.stderr
    assert [r["rank"] for r in json.loads(proc.stdout)["ranks"]] == list(range(GPU_LOG_RANKS))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("workload", sorted(TRAINING))
def test_healthy_canned_gpu_runs_pass_and_stragglers_name_the_slow_node(workload, shape, capsys):
    node_type, _ = SHAPES[shape]
    args = ["--test", TRAINING[workload], "--world-size", str(GPU_LOG_RANKS), "--node-type", node_type]
    assert verdict_main([*args, *map(str, gpu_logs(workload, shape, "healthy"))]) == 0, capsys.readouterr().out
    healthy = capsys.readouterr().out
    # Issue 25: a floor and the compute-time straggler check apply on every GPU shape (not-applicable fails here).
    assert any(line.startswith("PASS ") and " throughput_minimum: every rank >= " in line and "margin " in line
               for line in healthy.splitlines()), healthy
    assert any(line.startswith("PASS ") and " straggler.compute_ms_per_step: " in line
               for line in healthy.splitlines()), healthy
    assert verdict_main([*args, *map(str, gpu_logs(workload, shape, "straggler"))]) == 1
    out = capsys.readouterr().out
    named = [line for line in out.splitlines() if line.startswith("FAIL ") and " straggler." in line]
    assert named and all(f"node kwok-{shape}-1 (ranks 8-15, pod {workload}-training-1)" in x for x in named), out
    assert any(" straggler.compute_ms_per_step: " in line for line in named), out
    failed = [line.split()[1] for line in out.splitlines() if line.startswith("FAIL ")]
    stragglers = [line for line in failed if line.startswith("straggler.")]
    # The slow node is named by its probe (and compute time, where the verdict compares it); DDP drags
    # every rank's throughput down with it, below the p3 BERT floor there, which is a failure too.
    assert stragglers and set(failed) - set(stragglers) <= {"throughput_minimum:"}, failed


def test_the_canned_gpu_logs_are_what_the_generator_writes():
    pytest.importorskip("torch")
    from workloads.canned_gpu_logs import main as generate

    assert generate(["--check", "--out", str(CANNED)]) == 0, \
        "localcluster/emulation/canned_logs differ from hack/canned_gpu_logs.py: rerun it"


class RecordingApi:
    """What CannedPods writes: the Logs object and the pod's annotations."""

    def __init__(self) -> None:
        self.patches: list[dict] = []

    def apply(self, obj: dict, manager: str) -> None:
        pass

    def merge_patch(self, kind: str, name: str, patch: dict, namespace: str | None = None) -> None:
        self.patches.append(patch)


def test_a_pod_canned_because_a_container_has_no_command_is_reported_canned(tmp_path):
    """No canned-log annotation, a container without `command`: the agent serves canned logs, and
    the pod must not read as a real container run (issue 34, item 4)."""
    from harness.cluster.pods import execution_of
    from localcluster.hostnodes.pod_files import PodFiles

    api = RecordingApi()
    pods = CannedPods(api=api, files=PodFiles(tmp_path / "logs", tmp_path / "scratch"),  # type: ignore[arg-type]
                      canned_logs_dir=CANNED, default_canned_log="bert-mpirun-32ranks")
    pod = {"metadata": {"name": "w-0", "namespace": "ns", "uid": "u1", "annotations": {}},
           "spec": {"nodeName": "kwok-0", "containers": [{"name": "worker", "image": "bert"}]}}
    assert execution_of(pod) == "container"  # nothing yet says it is canned
    pods.serve(pod)
    annotations = api.patches[-1]["metadata"]["annotations"]
    assert annotations["kubetest2-training.local/canned-because"].startswith("no command")
    assert "worker" in annotations["kubetest2-training.local/canned-because"]
    pod["metadata"]["annotations"] = annotations
    assert execution_of(pod) == "canned"


def test_a_canned_log_that_declares_its_exit_status_fails_its_pod_with_that_code(tmp_path):
    """`# CANNED EXIT 11: ...` in a log's header: the pod gets fail=exit-code with that code, set with
    logs-ready in one patch (kwok runs it only then), so a verdict on its phase sees the failure."""
    from localcluster.emulation.canned_pods import declared_exit_code
    from localcluster.hostnodes.pod_files import PodFiles

    broken = (CANNED / "gpu-node-checks-broken" / "nvidia-driver-liveness-check.log").read_text().splitlines()
    assert declared_exit_code(broken) == 11  # driver-liveness-check.sh's exit after FAIL 1.5
    assert declared_exit_code((CANNED / "gpu-node-checks" / "nvidia-driver-liveness-check.log").read_text()
                              .splitlines()) is None
    assert declared_exit_code(["# CANNED OUTPUT ...", "OK 1.1", "# CANNED EXIT 3: not in the header"] * 2) is None

    def served(canned: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        api = RecordingApi()
        pods = CannedPods(api=api, files=PodFiles(tmp_path / canned / "logs", tmp_path / canned / "scratch"),  # type: ignore[arg-type]
                          canned_logs_dir=CANNED, default_canned_log="bert-mpirun-32ranks")
        pod = {"metadata": {"name": "check-0", "namespace": "ns", "uid": "u1",
                            "annotations": {"kubetest2-training.local/canned-log": canned, **(extra or {})},
                            "labels": {"kubetest2-training/job": "nvidia-driver-liveness-check"}},
               "spec": {"nodeName": "kwok-0", "containers": [{"name": "check", "image": "x", "command": ["bash"]}]}}
        pods.serve(pod)
        return api.patches[-1]["metadata"]["annotations"]

    marks = served("gpu-node-checks-broken")
    assert (marks["kubetest2-training.local/fail"], marks["kubetest2-training.local/exit-code"]) == ("exit-code", "11")
    assert marks["kubetest2-training.local/logs-ready"] == "true"
    assert "kubetest2-training.local/fail" not in served("gpu-node-checks")
    # a failure the pod's own annotations inject wins over the log's
    assert "kubetest2-training.local/exit-code" not in served("gpu-node-checks-broken",
                                                              {"kubetest2-training.local/fail": "oom"})
