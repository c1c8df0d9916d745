"""e2e-nvidia (also installed as nvidia.test): upstream aws-k8s-tester's nvidia suite under its test and
feature names, plus this project's GPU and interconnect checks.

Upstream's (test/cases/nvidia): TestMPIJobPytorchTraining (single-node, multi-node:<nccl test>),
TestSingleNodeUnitTest (unit-test, hpc-benckmarks: upstream's spelling), TestNvidiaDriverCapabilities,
TestContainerdConfig; each runs what upstream runs, waits failing fast, and judges more than the
job's success where its output says more. Ours: TestNCCLAllReduce, TestNCCLTests, TestGPUCapacity,
TestNodePairs (all-reduce between pairs of nodes in two passes: the slow node named). Upstream's opt-in
GPU sharing (--timeSlicingEnabled, --mpsEnabled; upstream's names): TestTimeSlicing
(feature time-slicing) and TestMps (feature mps; TestMPS still selects it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from harness.cluster.logs import CapturedLog
from harness.cluster.pods import run_interval
from harness.cluster.resources import NODE
from harness.cluster.wait import wait_for
from harness.config.settings import DCGM_IMAGE as NVIDIA_DCGM_IMAGE
from harness.config.settings import Config, Source
from harness.errors import TestFailure, WaitTimeout
from harness.framework.context import TestContext
from harness.framework.suite import GPU, GPU_EFA, NVIDIA, Feature, Suite, TestFunc
from harness.jobs.assessment import assess, busbw_baseline, record_verdict
from harness.jobs.images import image, is_project_image
from harness.jobs.job import Job, launch
from harness.jobs.workload import Workload
from harness.metrics.records import WorkloadMetrics, read_lines
from harness.runner import main as run_suite
from harness.setup.gpu_sharing import MPS, TIME_SLICING, GpuSharing, SharingMode, advertised, nodes_advertise
from harness.verdict.bandwidth import judge_busbw, sweep_max_bytes
from harness.verdict.capacity import check_gpus_seen, judge_advertised
from harness.verdict.checks import Check, Verdict
from harness.verdict.dcgm import EXIT_PREFIX as DCGM_EXIT_PREFIX
from harness.verdict.dcgm import judge_dcgm, parse_report
from harness.verdict.gpu_sharing import (
    check_advertised,
    check_compute_mode,
    check_overlap,
    check_uuids,
    peak_overlap,
)
from harness.verdict.gpu_sharing import (
    parse_report as parse_gpu_report,
)
from harness.verdict.node_pairs import Group, NodeResult, judge, plan

# With EFA on RDMA-capable instance types NCCL must use Libfabric with GPUDirect RDMA.
EFA_GDRDMA = re.compile(r"\[send\] via NET/.*Libfabric/.*/GDRDMA")
RDMA_CAPABLE_TYPES = re.compile(r"^(p4d|p4de|p5|p5e|p5en|p6-b200|trn1|trn1n|trn2)\.")
# upstream's instanceSupportsRdmaRead (test/cases/nvidia/mpi_test.go): larger sweeps and the GDRDMA check.
UPSTREAM_RDMA_READ_TYPES = ("p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5e.48xlarge", "p5en.48xlarge")
UPSTREAM_NCCL_TESTS = ("all_reduce_perf", "all_gather_perf", "alltoall_perf")
NCCL_TESTS_DIR = "/opt/nccl-tests/build"
# A line of `nvidia-smi -L`: one per GPU the pod sees.
GPU_LINE = re.compile(r"^GPU \d+: ")

SUITE = Suite("e2e-nvidia", "GPU and interconnect checks: upstream aws-k8s-tester's nvidia suite (MPIJob training and "
              "nccl-tests, GPU unit tests, driver capabilities, containerd config) and this project's bandwidth and "
              "GPU capacity checks.", aliases=("nvidia.test",))


def require_gpus(t: TestContext) -> None:
    if t.cfg.accelerator == "cpu":
        t.skip(f"{t.name} needs NVIDIA GPUs (ACCELERATOR=cpu)")


@SUITE.test("TestNCCLAllReduce", labels=GPU, assessments=("bus bandwidth",))
def test_nccl_allreduce(t: TestContext) -> None:
    """torch.distributed all-reduce sweep across all nodes and GPUs; bus bandwidth checked."""
    size = "tiny" if t.cfg.accelerator == "cpu" else "default"
    nodes = t.topology.node_count
    # Up to where the node type's bandwidth floor was measured (the verdict judges that size).
    needed = sweep_max_bytes(t.topology.node_type, nodes, "allreduce")
    sweep = ("--max-bytes", needed) if needed else ()
    job = launch(t, Workload("nccl-allreduce", "workloads.allreduce", ("--size", size, *sweep)))
    job.wait_succeeded()
    assess(t, job, "allreduce", lambda metrics: judge_busbw(
        "allreduce", metrics.sweep, t.topology.node_type, job.node_count, t.cfg.min_busbw,
        busbw_baseline(t, metrics)))


def used_gdrdma(logs: list[CapturedLog]) -> bool:
    """Whether NCCL said it sends over Libfabric with GPUDirect RDMA (read line by line: joining
    every log into one string held all of them in memory at once)."""
    current = [e for e in logs if not e.previous and e.path.exists()]
    return any(EFA_GDRDMA.search(line) for e in current for line in read_lines(e.path))


@dataclass(frozen=True)
class NcclSweep:
    """One nccl-tests run in an MPIJob: which collective, on how many nodes, how far, which buffer."""

    operation: str
    job_name: str
    nodes: int | None  # None: every node
    max_bytes: str
    buffsize: int
    # When EFA is in use: must NCCL show GPUDirect RDMA over Libfabric?
    requires_gdrdma: bool


def run_nccl_tests(t: TestContext, sweep: NcclSweep) -> None:
    """nccl-tests in an MPIJob like upstream's; results, bus bandwidth and the EFA path checked."""
    efa = bool(t.topology.efa_per_node)
    workload = Workload(
        sweep.job_name, binary=f"{NCCL_TESTS_DIR}/{sweep.operation}",
        args=("-b", "8", "-e", sweep.max_bytes, "-f", "2", "-c", "1", "-n", "10"),
        image=image(t, "nccl_tests_image"), launcher="mpi", nodes=sweep.nodes,
        extra_env={"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": str(sweep.buffsize),
                   **({"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"} if efa else {})})
    job = launch(t, workload)
    job.wait_succeeded()
    nodes = sweep.nodes or t.topology.node_count

    def bandwidth_and_path(metrics: WorkloadMetrics) -> Verdict:
        verdict = judge_busbw(sweep.operation, metrics.sweep, t.topology.node_type, nodes, t.cfg.min_busbw)
        # upstream's: judged only with --efaEnabled=true (its default false checks nothing about EFA)
        if t.cfg.efa_enabled and sweep.requires_gdrdma:
            verdict.add(check_gdrdma(t, job.capture_logs()))
        return verdict

    assess(t, job, more=bandwidth_and_path)


def check_gdrdma(t: TestContext, logs: list[CapturedLog]) -> Check:
    """With EFA on an RDMA-capable type, NCCL sends over Libfabric with GPUDirect RDMA."""
    if not used_gdrdma(logs):
        return Check.failed("efa.gdrdma", f"nccl-tests: EFA is enabled on {t.topology.node_type} but NCCL did not "
                                          f"use Libfabric with GPUDirect RDMA: no line matches {EFA_GDRDMA.pattern!r}")
    t.property("efa.gdrdma", "true")
    return Check.passed("efa.gdrdma", "NCCL sent over Libfabric with GPUDirect RDMA")


def ours_nccl(nodes: str) -> TestFunc:
    """TestNCCLTests' all_reduce_perf on one node or across all of them."""

    def run(t: TestContext) -> None:
        require_gpus(t)
        count = 1 if nodes == "single" else t.topology.node_count
        if nodes == "multi" and count < 2:
            t.skip("one node: the multi-node variant needs at least 2")
        rdma = bool(RDMA_CAPABLE_TYPES.match(t.topology.node_type))
        t.logf("nccl-tests all_reduce_perf on %d node(s)", count)
        # Far enough to reach the size the node type's floor was measured at (harness/verdict/bandwidth.py).
        max_bytes = sweep_max_bytes(t.topology.node_type, count, "all_reduce_perf") or ("2G" if count == 1 else "16G")
        run_nccl_tests(t, NcclSweep("all_reduce_perf", f"nccl-tests-{count}n", count, max_bytes, 8 * 1024 * 1024,
                                    rdma))

    return run


SUITE.features("TestNCCLTests", [
    Feature("single-node", ours_nccl("single"), GPU, ("MPIJob succeeds",)),
    Feature("multi-node", ours_nccl("multi"), GPU_EFA, ("MPIJob succeeds",)),
])


def upstream_sweep(operation: str, node_type: str) -> tuple[str, int]:
    """upstream's MaxBytes and NCCL_BUFFSIZE: 16G and 8 MiB on RDMA-read types (but all-to-all on
    p4 keeps the defaults), else 2G and 4 MiB."""
    if node_type in UPSTREAM_RDMA_READ_TYPES and not (operation == "alltoall_perf" and "p4" in node_type):
        return "16G", 8388608
    return "2G", 4194304


def multi_node(operation: str) -> TestFunc:
    """upstream's multi-node:<operation>: nccl-tests across every node in an MPIJob."""

    def run(t: TestContext) -> None:
        require_gpus(t)
        max_bytes, buffsize = upstream_sweep(operation, t.topology.node_type)
        job_name = f"multi-node-{operation}".replace("_", "-")
        run_nccl_tests(t, NcclSweep(operation, job_name, None, max_bytes, buffsize,
                                    t.topology.node_type in UPSTREAM_RDMA_READ_TYPES))

    return run


# upstream's single-node feature: pytorch/examples' MNIST for one epoch in --pytorchImage.
UPSTREAM_MNIST = ('import os; os.system("git clone https://github.com/pytorch/examples.git pytorch-examples"); '
                  'os.system("git -C pytorch-examples checkout 0f0c9131ca5c79d1332dce1f4c06fe942fbdc665"); '
                  'os.system("python pytorch-examples/mnist/main.py --epochs 1")')
MNIST_TEST_LINE = re.compile(r"Test set: Average loss: (?P<loss>[\d.]+), Accuracy: (?P<right>\d+)/(?P<total>\d+)")


def single_node(t: TestContext) -> None:
    """upstream's single-node: one process runs pytorch/examples' MNIST in --pytorchImage on one node.
    upstream's command ignores the example's failures (os.system), so the verdict also needs the
    example's `Test set: ... Accuracy` line."""
    require_gpus(t)
    job = launch(t, Workload("pytorch-training-single-node", binary="python", args=("-c", UPSTREAM_MNIST),
                             image=image(t, "pytorch_image"), launcher="per-node", nodes=1,
                             extra_env={"NCCL_DEBUG": "INFO"}))
    job.wait_succeeded()
    found = first_match(job, MNIST_TEST_LINE)
    if found is None:
        raise TestFailure("single-node: the MNIST example printed no 'Test set: Average loss: ..., Accuracy: ...' "
                          "line: it did not train (upstream's command exits 0 even so)")
    t.property("mnist.test_loss", found["loss"])
    t.property("mnist.accuracy", f"{int(found['right']) / int(found['total']):.4f}")


def first_match(job: Job, pattern: re.Pattern[str]) -> re.Match[str] | None:
    """The first line of the job's logs (current instances) matching `pattern`."""
    for entry in job.capture_logs():
        if entry.previous or not entry.path.exists():
            continue
        for line in read_lines(entry.path):
            match = pattern.search(line)
            if match:
                return match
    return None


SUITE.features("TestMPIJobPytorchTraining", upstream=True, features=[
    Feature("single-node", single_node, GPU, ("MPIJob succeeds",)),
    *(Feature(f"multi-node:{operation}", multi_node(operation), GPU_EFA, ("MPIJob succeeds",))
      for operation in UPSTREAM_NCCL_TESTS),
])


# bash_unit's TAP lines (upstream's gpu_unit_tests run with `-f tap`): `ok - test_x`, `not ok - test_y`.
TAP_LINE = re.compile(r"^(?P<verdict>ok|not ok) - (?P<test>\S+)(?P<skip>.*# skip)?")


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
    job = launch(t, Workload("unit-test-job", binary="/bin/bash", args=("./gpu_unit_tests/unit_test",),
                             image=image(t, "nccl_tests_image"), launcher="per-node", nodes=1, extra_env=env,
                             timeout=unit_test_wait(t.cfg)))
    job.wait_succeeded()
    verdicts = [(m["test"], "skip" if m["skip"] else m["verdict"]) for entry in job.capture_logs()
                if not entry.previous and entry.path.exists() for m in map(TAP_LINE.match, read_lines(entry.path)) if m]
    for name, verdict in verdicts:
        t.property(f"unit.{name}", verdict)
    failed = [name for name, verdict in verdicts if verdict == "not ok"]
    if not verdicts:
        raise TestFailure("unit-test: no TAP result line (`ok - test_...`) in the log: did gpu_unit_tests run?")
    if failed:
        raise TestFailure(f"unit-test: {len(failed)} of {len(verdicts)} GPU unit tests failed: {', '.join(failed)}")


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
    job.wait_succeeded()
    result, check = first_match(job, HPL_RESULT), first_match(job, HPL_CHECK)
    if result is not None:
        t.property("hpl.gflops", result["gflops"])
    if check is None or check["verdict"] != "PASSED":
        raise TestFailure("hpc-benckmarks: HPL's residual check did not pass: "
                          + (check.group(0) if check else "no '||Ax-b|| ... PASSED' line in the log"))


SUITE.features("TestSingleNodeUnitTest", upstream=True, features=[
    Feature("unit-test", unit_test, GPU, ("Unit test Job succeeds",)),
    Feature("hpc-benckmarks", hpc_benchmarks, GPU, ("HPC test Job succeeds",)),
])


# upstream's nvidia-driver-capabilities-check.yaml: load every capability the driver enables.
CAPABILITIES_IMAGE = "public.ecr.aws/ubuntu/ubuntu:22.04"
CAPABILITIES_SCRIPT = """set -e
apt-get update
apt-get install -y python3 python3-pip libgl1-mesa-glx libegl1-mesa-dev libgles2-mesa-dev mesa-utils xvfb
pip3 install moderngl
sleep 60
cat <<'EOF' > moderngl-script.py
import moderngl
moderngl.create_standalone_context(backend='egl')
EOF
python3 moderngl-script.py
"""


# What upstream's script (apt-get update and install, pip) needs of root, with every other capability
# dropped: apt runs its download methods as the `_apt` user and dpkg unpacks as root.
APT_CAPABILITIES = (
    "CHOWN",  # apt chowns its partial/ download folders to _apt; dpkg chowns unpacked files to their owners
    "SETUID",  # apt's methods drop to _apt (setresuid)
    "SETGID",  # ... and to its group, clearing root's supplementary groups (setgroups)
    "DAC_OVERRIDE",  # root then reads and moves the files _apt wrote in the folders it owns (mode 0700)
    "FOWNER",  # dpkg sets modes and times of files it no longer owns once chowned
    "KILL",  # apt stops its methods, processes of another user (_apt)
)


@SUITE.test("TestNvidiaDriverCapabilities", upstream=True, feature="nvidia-driver-capabilities-check", labels=NVIDIA,
            assessments=("Check Pod becomes ready",))
def test_nvidia_driver_capabilities(t: TestContext) -> None:
    """With NVIDIA_DRIVER_CAPABILITIES=all a pod loads every driver capability (ModernGL over EGL);
    a missing library fails it."""
    require_gpus(t)
    job = launch(t, Workload("moderngl-pod", binary="/bin/bash", args=("-c", CAPABILITIES_SCRIPT),
                             image=CAPABILITIES_IMAGE, launcher="per-node", nodes=1,
                             extra_env={"NVIDIA_DRIVER_CAPABILITIES": "all"}, capabilities=APT_CAPABILITIES))
    job.wait_succeeded()


# upstream's per-SKU DCGM overrides (#806, gpu_unit_tests/tests/dcgm-diag.yaml in its nvidia image):
# only GPU models that AWS wires to fewer PCIe lanes than the card supports, every other model keeps
# DCGM's defaults. DCGM's pcie test wants an x16 link (min_pci_width 16) and fails the L4 of single-GPU
# g6/gr6 sizes (an x8 slot) with DCGM_FR_PCIE_WIDTH, which --ignoreErrorCodes cannot mask and -p
# cannot reach (a sub-test parameter): a `-c` config file is DCGM's way. Kept equal to upstream's.
DCGM_DIAG_CONFIG = """version: "4.6.0"
spec: dcgm-diag-v1
skus:
  - name: NVIDIA L4
    id: 27b8
    pcie:
      is_allowed: true
      h2d_d2h_single_pinned:
        min_pci_generation: 1.0
        min_pci_width: 8.0
      h2d_d2h_single_unpinned:
        min_pci_generation: 1.0
        min_pci_width: 8.0
"""
# Where upstream's nvidia image has its config (its dcgm-diag.sh passes it): used when the image has it,
# as its version follows that image's DCGM; else this project's copy above, written to a file.
UPSTREAM_DCGM_DIAG_CONFIG = "/app/gpu_unit_tests/tests/dcgm-diag.yaml"
# nv-hostengine (daemonized) then dcgmi against it with the per-SKU config; dcgmi's exit status is
# printed rather than returned, so that a failing diagnostic's report is read and judged per GPU
# (harness/verdict/dcgm.py) instead of ending as "the pod failed".
DCGM_SCRIPT = f"""set -u
config={UPSTREAM_DCGM_DIAG_CONFIG}
if [ ! -f "$config" ]; then
  config="${{TMPDIR:-/tmp}}/dcgm-diag.yaml"
  cat > "$config" <<'EOF'
{DCGM_DIAG_CONFIG}EOF
fi
echo "DCGM per-SKU config: $config"
nv-hostengine
dcgmi diag -r "$DCGM_DIAG_LEVEL" -j -c "$config"
echo "{DCGM_EXIT_PREFIX}$?"
nv-hostengine --term >/dev/null 2>&1 || true
"""
# DCGM's diagnostics read the GPUs' profiling counters and set clocks and power limits for the
# stress tests: NVIDIA runs its DCGM containers with SYS_ADMIN.
DCGM_CAPABILITIES = ("SYS_ADMIN",)


def dcgm_image(t: TestContext) -> str:
    """upstream's: --nvidiaTestImage (its image has DCGM and the per-SKU config). DCGM_IMAGE, when set,
    wins; this project's nccl-tests image has no DCGM (images/README.md), so NVIDIA's DCGM image
    stands in for it."""
    if t.cfg.dcgm_image:
        return image(t, "dcgm_image")
    test_image = image(t, "nccl_tests_image")
    return NVIDIA_DCGM_IMAGE if is_project_image(test_image) else test_image


@SUITE.test("TestDcgmDiagnostics", upstream=True, feature="dcgm-diag", labels=GPU,
            assessments=("DCGM level-{dcgm_diag_level} diagnostic passes",))
def test_dcgm_diagnostics(t: TestContext) -> None:
    """upstream's opt-in deep DCGM diagnostic (`dcgmi diag -r <level> -c <per-SKU config>`, up to hours):
    skipped unless --dcgmDiagEnabled, as upstream's. Runs on every node (a per-node Job with all its
    GPUs, in --nvidiaTestImage as upstream's); each node's JSON report is judged: any failed test
    fails the node, naming the test, the GPU and DCGM's warning (harness/verdict/dcgm.py)."""
    if not t.cfg.dcgm_diag_enabled:
        t.skip("skipping deep DCGM diagnostics; set --dcgmDiagEnabled to run (long-running, not suitable for a "
               "per-build gate)")
    require_gpus(t)
    minutes, level = t.cfg.dcgm_diag_timeout_minutes, t.cfg.dcgm_diag_level
    if minutes < 2:
        raise TestFailure(f"--dcgmDiagTimeoutMinutes={minutes}: at least 2 (the Job's deadline sits a minute "
                          "inside the wait)")
    t.property("dcgm.level", level)
    job = launch(t, Workload("dcgm-diag", binary="/bin/bash", args=("-c", DCGM_SCRIPT), image=dcgm_image(t),
                             launcher="per-node", extra_env={"DCGM_DIAG_LEVEL": level},
                             capabilities=DCGM_CAPABILITIES, timeout=minutes * 60.0,
                             deadline_seconds=(minutes - 1) * 60))
    job.wait_succeeded()
    reports = [parse_report(log.node, read_lines(log.path)) for log in job.capture_logs()
               if not log.previous and log.path.exists()]
    record_verdict(t, judge_dcgm(reports, job.placement.node_names, t.topology.gpus_per_node, level))


# upstream's daemonset-containerd-check.yaml, verbatim: the node's containerd config must name an
# ECR (or local) sandbox image, the nvidia-container-runtime and the systemd cgroup driver.
CONTAINERD_CHECK_IMAGE = "public.ecr.aws/amazonlinux/amazonlinux:latest"
CONTAINERD_PASSED = "containerd config check PASSED."
CONTAINERD_SCRIPT = r"""set -e
set -o pipefail
echo "=== content read by the container ==="
cat /host-etc/containerd/config.toml
version_line=$(grep -E '^version\s*=' /host-etc/containerd/config.toml || true)
if [ -z "$version_line" ]; then
  echo "FAIL: no version line found in containerd config"
  exit 1
fi
version=$(echo "$version_line" | cut -d'=' -f2 | tr -d ' ')
echo "INFO: containerd config version = $version"
if [ "$version" = "2" ]; then
  sandbox_line=$(grep -E 'sandbox_image\s*=' /host-etc/containerd/config.toml || true)
elif [ "$version" = "3" ]; then
  sandbox_line=$(grep -E 'sandbox\s*=' /host-etc/containerd/config.toml || true)
else
  echo "FAIL: unsupported containerd config version: $version"
  exit 1
fi
if [ -z "$sandbox_line" ]; then
  echo "FAIL: no sandbox_image or sandbox line found"
  exit 1
fi
sandbox_image=$(echo "$sandbox_line" | cut -d'"' -f2)
if [[ "$sandbox_image" == "localhost"* ]]; then
  echo "INFO: skipping .ecr. check for localhost sandbox image"
elif [[ "$sandbox_image" != *".ecr."* ]]; then
  echo "FAIL: no .ecr. reference in $sandbox_image"
  exit 1
fi
if ! grep -q "nvidia-container-runtime" /host-etc/containerd/config.toml; then
  echo "FAIL: no nvidia-container-runtime found"
  exit 1
fi
if ! ( grep -q 'systemd_cgroup = true' /host-etc/containerd/config.toml || \
       grep -q 'SystemdCgroup = true' /host-etc/containerd/config.toml ); then
  echo "FAIL: no systemd cgroup setting"
  exit 1
fi
echo "containerd config check PASSED."
tail -f /dev/null
"""


@SUITE.test("TestContainerdConfig", upstream=True, feature="containerd-config-check", labels=NVIDIA,
            assessments=("DaemonSet becomes ready",))
def test_containerd_config(t: TestContext) -> None:
    """A DaemonSet reads each node's /etc/containerd/config.toml; it must be Ready on every node and
    each pod must say the check passed (a failing check crash-loops: the test fails at once)."""
    require_gpus(t)
    job = launch(t, Workload("containerd-check", binary="sh", args=("-c", CONTAINERD_SCRIPT),
                             image=CONTAINERD_CHECK_IMAGE, launcher="daemonset",
                             host_paths={"/host-etc/containerd": "/etc/containerd"}))
    job.wait_succeeded()
    silent = [entry.pod for entry in job.capture_logs() if not entry.previous
              and not any(CONTAINERD_PASSED in line for line in read_lines(entry.path))]
    if silent:
        raise TestFailure(f"containerd-config-check: no '{CONTAINERD_PASSED}' in the log of {', '.join(silent)}")


def gpus_listed(log: CapturedLog) -> int:
    """How many GPUs `nvidia-smi -L` listed in a pod's log."""
    return sum(1 for line in read_lines(log.path) if GPU_LINE.match(line))


@SUITE.test("TestGPUCapacity", labels=GPU, assessments=("GPUs seen",))
def test_gpu_capacity(t: TestContext) -> None:
    """Every node advertises the GPUs (and EFA devices) its type should have (harness/verdict/capacity.py:
    the table, else the most any node advertises; GPUS_PER_NODE wins), and a pod on each node sees
    them all."""
    if t.cfg.accelerator == "cpu":
        t.skip("no GPUs to check with ACCELERATOR=cpu")
    record_verdict(t, judge_advertised(t.topology))
    listing = launch(t, Workload("gpu-capacity", binary="nvidia-smi", args=("-L",), image=image(t, "nccl_tests_image"),
                                 launcher="per-node"))
    listing.wait_succeeded()
    seen = [(log.pod, log.node, gpus_listed(log)) for log in listing.capture_logs()]
    for _, node, count in seen:
        t.property(f"node.{node}.gpus_seen", count)
    record_verdict(t, Verdict([check_gpus_seen(seen, t.topology.gpus_per_node)]))


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


@SUITE.test("TestNodePairs", labels=GPU, assessments=("the slow node named",))
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
    figures = [run_pass(t, number, groups) for number, groups in enumerate(the_plan.passes, start=1)]
    results = judge(the_plan, figures, t.cfg.straggler_fraction)
    t.result_json.verdict.references["node_pairs"] = {
        "passes": [[{"nodes": list(g), "busbw_gbps": figures[p].get(g)} for g in groups]
                   for p, groups in enumerate(the_plan.passes)],
        "nodes": {r.node: {"partners": [list(x) for x in r.partners], "busbw_gbps": list(r.figures),
                           "thresholds": list(r.thresholds), "slow": list(r.slow), "failed": r.failed}
                  for r in results}}
    for result in results:
        t.run(result.node, node_case(result))


# TestTimeSlicing and TestMps (upstream's opt-in --timeSlicingEnabled, #813, and --mpsEnabled, #817):
# the NVIDIA device plugin (the run's, or one present before it) is replaced by one sharing each GPU
# GPU_SHARING_REPLICAS times (harness/setup/gpu_sharing.py), every node of the type is filled with
# pods of one GPU each, all at once, and harness/verdict/gpu_sharing.py judges what the nodes
# advertise, the overlap, the GPUs the pods name and (MPS) the compute mode. Each pod prints its
# GPU's UUID and compute mode, then holds the GPU SHARING_HOLD_SECONDS so that all of them run at
# once (the Job controller starts them in batches).
SHARING_HOLD_SECONDS = 30
SHARING_SCRIPT = (f"nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader && sleep {SHARING_HOLD_SECONDS}")
SHARING_FLAGS = {TIME_SLICING.name: "--timeSlicingEnabled", MPS.name: "--mpsEnabled"}


def sharing_enabled(t: TestContext, mode: SharingMode) -> bool:
    return t.cfg.mps_enabled if mode.mps else t.cfg.time_slicing_enabled


def sharing_replicas(cfg: Config, mode: SharingMode) -> int:
    """--mpsReplicas / --timeSlicingReplicas (upstream's), else GPU_SHARING_REPLICAS."""
    own = cfg.mps_replicas if mode.mps else cfg.time_slicing_replicas
    return own if own is not None else cfg.gpu_sharing_replicas


def gpu_sharing(mode: SharingMode) -> TestFunc:
    """One sharing mode's test (see above); skipped unless its flag is set."""

    def run(t: TestContext) -> None:
        flag = SHARING_FLAGS[mode.name]
        if not sharing_enabled(t, mode):
            t.skip(f"skipping GPU sharing ({mode.name}); set {flag} to run (it replaces the NVIDIA device plugin this "
                   "run installs, cluster-wide, for the test's duration)")
        if not t.cfg.install_device_plugin:
            # upstream's: the plugin to reconfigure must be one the suite deploys (EKS Auto ships its own).
            t.skip(f"skipping {mode.name}; requires --installDevicePlugin so the plugin under reconfiguration is one "
                   "this suite owns")
        if t.cfg.accelerator != "nvidia":
            raise TestFailure(f"{flag} needs ACCELERATOR=nvidia (got ACCELERATOR={t.cfg.accelerator}): the test "
                              "reconfigures the NVIDIA device plugin")
        pod_image = image(t, "nccl_tests_image")  # before the device plugin is reconfigured
        replicas = sharing_replicas(t.cfg, mode)
        physical = {node.name: node.gpus for node in t.topology.nodes}
        t.property("gpu_sharing.mode", mode.name)
        t.property("gpu_sharing.replicas", replicas)
        sharing = GpuSharing(t.session, mode, replicas, t.topology.node_names, physical=physical)
        # Registered before the workload's teardown, so it runs after it (the workload is drained first).
        t.cleanup(sharing.restore, f"restore the stock NVIDIA device plugin ({mode.name})")
        sharing.share()
        expected = {node: count * replicas for node, count in physical.items()}
        try:
            wait_for(t.cluster, nodes_advertise(expected), timeout=t.cfg.discovery_timeout, cancel=t.cancel)
        except WaitTimeout as exc:
            t.logf("%s", exc)  # judged below, with what the nodes advertise now
        allocatable = advertised(t.cluster.list(NODE).get("items", []))
        for node in physical:
            t.property(f"node.{node}.gpus_advertised", allocatable.get(node, 0))
        verdict = Verdict([check_advertised(allocatable, physical, replicas)])
        if verdict.failures:
            record_verdict(t, verdict)
        # upstream's count: every node of the type, each filled with its shared GPUs' worth of pods.
        per_node = t.topology.gpus_per_node * replicas
        pods, gpus = per_node * len(physical), sum(physical.values())
        job = launch(t, Workload(f"gpu-sharing-{mode.name}", binary="sh", args=("-c", SHARING_SCRIPT),
                                 image=pod_image, launcher="shared-gpu", pods=per_node))
        sharing.workload = (job.namespace, job.selector)
        job.wait_succeeded()
        logs = [entry for entry in job.capture_logs() if not entry.previous]
        reports = {entry.pod: parse_gpu_report(entry.pod, entry.node, read_lines(entry.path)) if entry.path.exists()
                   else None for entry in logs}
        intervals = {name: span for name, pod in job.pods_seen.items() if (span := run_interval(pod)) is not None}
        t.property("gpu_sharing.pods", pods)
        t.property("gpu_sharing.peak_running", peak_overlap(intervals.values()))
        seen = [report for report in reports.values() if report is not None]
        t.property("gpu_sharing.uuids", ",".join(sorted({r.uuid for r in seen})))
        t.property("gpu_sharing.compute_modes", ",".join(sorted({r.compute_mode for r in seen})))
        verdict.add([check_overlap(intervals, pods, gpus), check_uuids(reports, gpus, replicas)])
        if mode.mps:
            verdict.add(check_compute_mode(seen))
        record_verdict(t, verdict)

    return run


SUITE.features("TestTimeSlicing", upstream=True, features=[
    Feature("time-slicing", gpu_sharing(TIME_SLICING), GPU,
            ("node advertises time-sliced GPUs", "oversubscribed pods share a physical GPU concurrently")),
])
# upstream's name is TestMps (#817); TestMPS, this project's earlier name, still selects it.
SUITE.features("TestMps", upstream=True, aliases=("TestMPS",), features=[
    Feature("mps", gpu_sharing(MPS), GPU, ("node advertises MPS-shared GPUs",
                                           "oversubscribed pods share a physical GPU concurrently",
                                           "GPU is in EXCLUSIVE_PROCESS compute mode")),
])


def main() -> None:
    sys.exit(run_suite(SUITE))


if __name__ == "__main__":
    main()
