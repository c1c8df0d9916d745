"""Canned-log sets (hack/canned-logs/<set>/): the node agent picks a pod's log by its job and
container, and the nvidia-suite set holds what each test of the nvidia suite parses."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from local_cluster.canned_pods import CannedPods

from harness.metrics.records import combine, scan_lines
from testbins import e2e_nvidia

CANNED = Path(__file__).resolve().parents[2] / "hack" / "canned-logs"
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
        assert any(e2e_nvidia.EFA_GDRDMA.search(line) for line in lines_of(job, "launcher"))


def test_the_unit_test_hpl_and_mnist_lines_match_what_the_tests_read():
    tap = [m for m in map(e2e_nvidia.TAP_LINE.match, lines_of("unit-test-job", "probe")) if m]
    assert len(tap) == 9 and sum(1 for m in tap if m["skip"]) == 1
    hpl = lines_of("hpc-benckmarks-job", "probe")
    assert any(e2e_nvidia.HPL_RESULT.match(line) for line in hpl)
    assert any(e2e_nvidia.HPL_CHECK.search(line)["verdict"] == "PASSED" for line in hpl if "Ax-b" in line)
    assert any(e2e_nvidia.MNIST_TEST_LINE.search(line) for line in lines_of("pytorch-training-single-node", "probe"))
    assert e2e_nvidia.CONTAINERD_PASSED in lines_of("containerd-check", "check")
