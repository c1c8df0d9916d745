"""TestSingleNodeUnitTest (upstream's unit_test.go): unit-test (gpu_unit_tests) and hpc-benckmarks (HPL)."""

from __future__ import annotations

import re

from harness.config.settings import Config, Source
from harness.errors import JobFailed, TestFailure
from harness.framework.context import TestContext
from harness.jobs.images import image
from harness.jobs.job import Job, launch
from harness.jobs.workload import Workload
from harness.metrics.records import read_lines
from testbins.nvidia.common import first_match, require_gpus

# bash_unit's TAP lines (upstream's gpu_unit_tests run with `-f tap`): `ok - test_x`, `not ok - test_y`.
TAP_LINE = re.compile(r"^(?P<verdict>ok|not ok) - (?P<test>\S+)(?P<skip>.*# skip)?")


# upstream's unit-test runs `./gpu_unit_tests/unit_test` in its image's working directory (/app in
# aws-k8s-tester's test/images/nvidia). The project's nccl-tests image has no gpu_unit_tests, and a user
# may point --nvidiaTestImage at any nccl-tests image: the pod checks first and says so in a line the
# verdict reads, instead of bash's `No such file or directory` (exit 127) under a generic failure.
UNIT_TEST_SCRIPT = "./gpu_unit_tests/unit_test"
NO_UNIT_TEST = "kt2t-unit-test: no gpu_unit_tests in this image:"
UNIT_TEST_COMMAND = (f'if [ ! -f {UNIT_TEST_SCRIPT} ]; then echo "{NO_UNIT_TEST} $(pwd)/{UNIT_TEST_SCRIPT[2:]} '
                     f'does not exist"; exit 3; fi; exec bash {UNIT_TEST_SCRIPT}')


# upstream's wait for the unit-test Job (#766: nvbandwidth alone takes about 39 minutes on p3.16xlarge).
UNIT_TEST_WAIT_SECONDS = 60 * 60.0


def unit_test_wait(cfg: Config) -> float:
    """upstream's 60 minutes, unless JOB_TIMEOUT was set (flag or env): JOB_TIMEOUT's 20-minute default
    kills the suite on 8-GPU nodes. The per-node Job's deadline follows it (a minute past the wait)."""
    return cfg.job_timeout if cfg.origin("job_timeout").source is not Source.DEFAULT else UNIT_TEST_WAIT_SECONDS


def unit_test(t: TestContext) -> None:
    """upstream's unit-test: gpu_unit_tests (deviceQuery, vectorAdd, nvbandwidth, DCGM diagnostics,
    system info) in --nvidiaTestImage on one node; each unit test's verdict recorded."""
    require_gpus(t)
    env = {"SKIP_TESTS_SUBCOMMAND": t.cfg.skip_unit_test_subcommand or "", "DEMO_SUITE_DIR": "/usr/bin",
           "EC2_INSTANCE_TYPE": t.topology.node_type}
    unit_image = image(t, "nccl_tests_image")
    job = launch(t, Workload("unit-test-job", binary="/bin/bash", args=("-c", UNIT_TEST_COMMAND),
                             image=unit_image, launcher="per-node", nodes=1, extra_env=env,
                             timeout=unit_test_wait(t.cfg)))
    t.assessment("Unit test Job succeeds", lambda: unit_tests_passed(t, job, unit_image))


def unit_tests_passed(t: TestContext, job: Job, unit_image: str) -> None:
    """The unit-test Job succeeds and every TAP line it printed says ok (or skip), each recorded; an
    image without gpu_unit_tests fails at once, naming the setting and what the image must hold."""
    try:
        job.wait_succeeded()
    except JobFailed as exc:
        if NO_UNIT_TEST not in str(exc):
            raise
        raise TestFailure(missing_unit_tests(unit_image, str(exc))) from None
    verdicts = [(m["test"], "skip" if m["skip"] else m["verdict"]) for entry in job.capture_logs()
                if not entry.previous and entry.path.exists() for m in map(TAP_LINE.match, read_lines(entry.path)) if m]
    for name, verdict in verdicts:
        t.property(f"unit.{name}", verdict)
    failed = [name for name, verdict in verdicts if verdict == "not ok"]
    if not verdicts:
        raise TestFailure("unit-test: no TAP result line (`ok - test_...`) in the log: did gpu_unit_tests run?")
    if failed:
        raise TestFailure(f"unit-test: {len(failed)} of {len(verdicts)} GPU unit tests failed: {', '.join(failed)}")


def missing_unit_tests(unit_image: str, failure: str) -> str:
    """Why the unit test could not run in `unit_image`, and which image it needs."""
    said = next((line.strip() for line in failure.splitlines() if NO_UNIT_TEST in line), NO_UNIT_TEST)
    return (f"unit-test: the image {unit_image} (--nvidiaTestImage / NCCL_TESTS_IMAGE) cannot run upstream's unit "
            f"test: {said.split(NO_UNIT_TEST, 1)[1].strip()}. It needs upstream's gpu_unit_tests "
            f"({UNIT_TEST_SCRIPT} in its working directory: bash_unit with deviceQuery, vectorAdd, nvbandwidth and "
            "DCGM), as aws-k8s-tester's test/images/nvidia image has; the project's nccl-tests image holds "
            "nccl-tests and OpenMPI only")


HPC_BENCHMARKS_IMAGE = "nvcr.io/nvidia/hpc-benchmarks:25.04"
# HPL's result row (`WR... N NB P Q Time Gflops`) and its residual check.
HPL_RESULT = re.compile(r"^W[RC]\S+\s+\d+\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+(?P<gflops>[\d.eE+-]+)")
HPL_CHECK = re.compile(r"\|\|Ax-b\|\|.*\.\.\.\.\.\. (?P<verdict>PASSED|FAILED)")


def hpl_affinity(gpus: int, cpus: int) -> tuple[str, str]:
    """hpl.sh's --mem-affinity and --cpu-affinity for a rank per GPU on a node of `cpus` CPUs.

    upstream's fixed `0-13:...:98-111` names 112 CPUs: on a p4d (96) ranks 7's CPUs do not exist and
    hpl.sh fails; on a p5 (192) 80 CPUs idle. Here the CPUs are split in equal contiguous ranges, one
    per rank, and the first half of the ranks use NUMA node 0, the rest node 1 (as upstream's
    0:0:0:0:1:1:1:1: EC2's multi-GPU types are two-socket, CPUs numbered socket by socket)."""
    if gpus < 1 or cpus < gpus:
        raise TestFailure(f"hpc-benckmarks: cannot give {gpus} HPL ranks a CPU each on a node with {cpus} CPUs")
    per = cpus // gpus
    cpu = ":".join(f"{i * per}-{(i + 1) * per - 1}" for i in range(gpus))
    mem = ":".join(str(i * 2 // gpus) if gpus > 1 else "0" for i in range(gpus))
    return mem, cpu


def hpc_benchmarks(t: TestContext) -> None:
    """upstream's hpc-benckmarks: NVIDIA's HPL on every GPU of one node; its residual check must pass."""
    require_gpus(t)
    gpus = t.topology.gpus_per_node
    mem_affinity, cpu_affinity = hpl_affinity(gpus, t.topology.nodes[0].cpus)
    command = ("mpirun", "--allow-run-as-root", "-np", str(gpus), "-bind-to", "none", "-x", "NCCL_DEBUG=INFO",
               "-x", "HPL_FCT_COMM_POLICY=1", "-x", "HPL_USE_NVSHMEM=0", "hpl.sh", "--mem-affinity",
               mem_affinity, "--cpu-affinity", cpu_affinity,
               "--no-multinode", "--dat", "hpl-linux-x86_64/sample-dat/HPL-dgx-1N.dat")
    job = launch(t, Workload("hpc-benckmarks-job", binary=command[0], args=command[1:], image=HPC_BENCHMARKS_IMAGE,
                             launcher="per-node", nodes=1, extra_env={"UCX_TLS": "^sysv"}))
    t.assessment("HPC test Job succeeds", lambda: hpl_passed(t, job))


def hpl_passed(t: TestContext, job: Job) -> None:
    """The HPL Job succeeds and its residual check passed; its Gflops recorded."""
    job.wait_succeeded()
    result, check = first_match(job, HPL_RESULT), first_match(job, HPL_CHECK)
    if result is not None:
        t.property("hpl.gflops", result["gflops"])
    if check is None or check["verdict"] != "PASSED":
        raise TestFailure("hpc-benckmarks: HPL's residual check did not pass: "
                          + (check.group(0) if check else "no '||Ax-b|| ... PASSED' line in the log"))


