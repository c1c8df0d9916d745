"""The harness's cost curve from 8 to 1,000 GPU nodes (8,000 ranks): each phase's wall and CPU time,
peak RSS, API requests, bytes read, JUnit size, and the fitted growth of each. `name: value unit`
lines, then a table per launcher.

    .venv/bin/python bench/scale.py                                # on-cluster and offline, every size
    .venv/bin/python bench/scale.py cluster --nodes 8,64,256       # only on the local cluster
    .venv/bin/python bench/scale.py offline --nodes 8,64,256,1000  # parse..report on generated logs

On-cluster (`cluster`): a local cluster of its own (KT2T_STATE / KT2T_PORT_OFFSET, else
/tmp/kt2t-bench/scale/cluster and offset 400), GPU-shaped kwok nodes (8 GPUs each), and for each
size and launcher `e2e-nvidia-training --test.run=TestBertTraining` across every node: torchrun (an
Indexed Job, one pod per node, 8 ranks each) and mpi (an MPIJob: a worker per node, the launcher's
tagged log holds every rank). Every pod serves its own generated log (bench/scale_logs.py: about 64
KiB a pod, every 50th pod 1 MiB) through the node agent's `{index}` canned-log names. The binary's
`-test.v` lines mark the phases (harness/jobs/job.py logs each); at each mark the bench reads the
binary's CPU and RSS from /proc, and the cluster's components' CPU, so each phase has its own CPU
figures. report.html is timed as `python -m harness.report ARTIFACTS` afterwards.

Offline (`offline`): the test's own assessment (harness.jobs.assessment.assess, as the binaries call
it: metrics recorded, every check),
the JUnit writer and the report on generated logs already on disk, with no cluster: parse,
verdict, JUnit and report at up to 8,000 ranks (and beyond) where the local cluster cannot go,
each in a fresh process.

Figures are the harness's CPU (trustworthy on a busy machine) and wall times (medians need
repeats; the load average is printed with each run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import scale_logs
from bench_common import BenchCluster, emit, progress

REPO = Path(__file__).resolve().parents[1]
PYTHON = Path(sys.executable)
BINARY = PYTHON.parent / "e2e-nvidia-training"
CANNED = REPO / "localcluster" / "emulation" / "canned_logs"
WORK = Path("/tmp/kt2t-bench/scale")
CLUSTER = BenchCluster.from_env(WORK / "cluster", 400)
ANNOTATION = "kubetest2-training.local"
LOG_PREFIX = "scale-bench"
GPUS_PER_NODE = 8
LAUNCHERS = ("torchrun", "mpi")
SIZES = (8, 64, 256, 1000)
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "mpi-operator",
              "node-agent")

# The binary's -test.v lines that end each phase, in order (harness/jobs/job.py logs them).
MARKS = (
    ("run", re.compile(r"^=== RUN\s+TestBertTraining$")),
    ("launched", re.compile(r"^\s+launched ")),
    ("started", re.compile(r"^\s+all \d+ worker pods started")),
    ("done", re.compile(r"^\s+(mpi)?job \S+ succeeded after")),
    ("captured", re.compile(r"^\s+captured \d+ logs")),
    ("parsed", re.compile(r"^\s+parsed the metrics")),
    ("teardown", re.compile(r"^\s+teardown of ")),
    ("tested", re.compile(r"^--- (PASS|FAIL): TestBertTraining")),
    ("finished", re.compile(r"^(PASS|FAIL)$")),
)
# phase -> (the mark it starts at, the mark it ends at); "start" is the binary's start.
PHASES = {
    "discovery": ("start", "run"),  # interpreter start, imports, connect, node discovery
    "launch": ("run", "launched"),  # namespace, render, apply
    "wait_running": ("launched", "started"),  # until every worker pod started
    "wait_done": ("started", "done"),  # the training itself (canned: run-duration)
    "log_capture": ("done", "captured"),
    "parse": ("captured", "parsed"),
    "verdict": ("parsed", "teardown"),  # metrics recorded as properties, the checks
    "teardown": ("teardown", "tested"),  # events, delete, namespace gone
    "junit_report": ("tested", "finished"),  # JUnit, metadata.json and report.html written
}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---------------------------------------------------------------------------------------------
# /proc readings: a process's CPU, memory and bytes read


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (and of its waited-for children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def proc_status_mib(pid: int, field_name: str) -> float:
    match = re.search(rf"^{field_name}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(match.group(1)) / 1024 if match else 0.0


def proc_read_bytes(pid: int) -> int:
    """rchar: every byte the process read (sockets and files)."""
    match = re.search(r"^rchar: (\d+)", Path(f"/proc/{pid}/io").read_text(), re.M)
    return int(match.group(1)) if match else 0


def component_pids() -> dict[str, list[int]]:
    """The cluster's processes (a supervised component: the supervisor and its child)."""
    pids: dict[str, list[int]] = {}
    for name in COMPONENTS:
        with contextlib.suppress(OSError, ValueError):
            pid = CLUSTER.pid_of(name)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            pids[name] = [pid, *map(int, children)]
    return pids


def components_cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    cpu = {}
    for name, group in pids.items():
        with contextlib.suppress(OSError):
            cpu[name] = sum(proc_cpu(pid) for pid in group)
    return cpu


def components_rss(pids: dict[str, list[int]]) -> dict[str, float]:
    rss = {}
    for name, group in pids.items():
        with contextlib.suppress(OSError):
            rss[name] = sum(proc_status_mib(pid, "VmRSS") for pid in group)
    return rss


@dataclass
class Mark:
    """A moment of the run: wall time, the binary's CPU, RSS and peak RSS so far, the cluster's CPU."""

    wall: float
    cpu: float
    rss_mib: float
    cluster_cpu: dict[str, float]
    hwm_mib: float = 0.0


@dataclass
class RunResult:
    marks: dict[str, Mark] = field(default_factory=dict)
    rc: int = -1
    cpu: float = 0.0
    peak_rss_mib: float = 0.0
    rchar: int = 0
    cluster_peak_rss: dict[str, float] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    outcome: str = ""
    junit_bytes: int = 0
    artifacts: Path | None = None
    cpu_samples: list[tuple[float, float]] = field(default_factory=list)  # (wall, the binary's CPU)


# ---------------------------------------------------------------------------------------------
# The bench's own cluster


def ready_gpu_nodes(kubeconfig: str) -> int:
    """How many GPU nodes hack/local-cluster made, if all of them are Ready and untainted; else 0."""
    from harness.cluster.client import Cluster
    from harness.cluster.resources import NODE

    nodes = Cluster.connect(kubeconfig).list(NODE, label_selector="kubetest2-training.local/node=gpu")["items"]
    usable = [n for n in nodes if not n.get("spec", {}).get("taints") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in n.get("status", {}).get("conditions") or [])]
    return len(nodes) if len(usable) == len(nodes) else 0


def set_gpu_nodes(kubeconfig: str, count: int) -> None:
    """Replace the nodes with `count` GPU nodes (unless they are there); print how long it took and
    the cluster's memory."""
    if ready_gpu_nodes(kubeconfig) == count:
        progress(f"{count} GPU nodes already Ready")
        return
    progress(f"hack/local-cluster nodes --shape gpu --count {count}")
    started = time.perf_counter()
    CLUSTER.run("nodes", "--shape", "gpu", "--count", str(count), timeout=3600)
    wall = time.perf_counter() - started
    emit(f"scale.nodes_{count}.create_nodes.wall", wall, "s",
         f"{count / wall:.1f} nodes/s Ready and untainted; load {load_average()}")
    for name, mib in components_rss(component_pids()).items():
        emit(f"scale.nodes_{count}.cluster.{name}.rss", mib, "MiB", "after the nodes are Ready")


@contextlib.contextmanager
def canned_logs(launcher: str, nodes: int) -> Iterator[dict[str, str]]:
    """Writes each pod's generated log under localcluster/emulation/canned_logs/; yields the
    POD_ANNOTATIONS for them."""
    written: list[Path] = []
    if launcher == "torchrun":
        size = scale_logs.write_pod_logs(CANNED, f"{LOG_PREFIX}-torchrun", nodes, GPUS_PER_NODE)
        written = [CANNED / f"{LOG_PREFIX}-torchrun-{i}.log" for i in range(nodes)]
        annotations = {f"{ANNOTATION}/canned-log-worker": f"{LOG_PREFIX}-torchrun-{{index}}"}
    else:
        launcher_log, worker_log = CANNED / f"{LOG_PREFIX}-mpi-launcher.log", CANNED / f"{LOG_PREFIX}-mpi-worker.log"
        size = scale_logs.write_launcher_log(launcher_log, nodes, GPUS_PER_NODE)
        worker_log.write_text(scale_logs.WORKER_LOG)
        written = [launcher_log, worker_log]
        annotations = {f"{ANNOTATION}/canned-log-launcher": launcher_log.stem,
                       f"{ANNOTATION}/canned-log-worker": worker_log.stem}
    progress(f"generated {size / 2**20:.1f} MiB of logs for {nodes} nodes ({launcher})")
    try:
        yield annotations
    finally:
        for path in written:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# One run of the binary, its phases marked from its output


def _sample(pids: dict[str, list[int]], peaks: dict[str, float], harness: list[tuple[float, float]],
            process: subprocess.Popen[str], started: float, stop: threading.Event) -> None:
    """Every second: the cluster's RSS (for its peaks) and the binary's CPU (for its idle rate)."""
    while not stop.wait(1.0):
        for name, mib in components_rss(pids).items():
            peaks[name] = max(peaks.get(name, 0.0), mib)
        with contextlib.suppress(OSError):
            harness.append((time.perf_counter() - started, proc_cpu(process.pid)))


def idle_cpu_rate(result: RunResult, run_seconds: float) -> float | None:
    """The binary's CPU per second of wall while every pod runs and none has ended yet (from 5 s
    after the last pod started to 5 s before the first can end): what waiting costs."""
    launched, started = result.marks.get("launched"), result.marks.get("started")
    if launched is None or started is None:
        return None
    begin, end = started.wall + 5, launched.wall + run_seconds - 5
    window = [(t, cpu) for t, cpu in result.cpu_samples if begin <= t <= end]
    if len(window) < 10:
        return None
    return (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])


def run_binary(kubeconfig: str, launcher: str, nodes: int, annotations: dict[str, str],
               run_duration: str, profile: Path | None = None) -> RunResult:
    """TestBertTraining across every node; marks at each phase's log line. With `profile`, under
    py-spy (every thread, folded stacks into that folder): its own CPU then counts in the figures."""
    artifacts = Path(tempfile.mkdtemp(prefix=f"artifacts-{launcher}-{nodes}-", dir=WORK))
    pod_annotations = {**annotations, f"{ANNOTATION}/run-duration": run_duration}
    env = {**os.environ, "KUBECONFIG": kubeconfig, "ARTIFACTS": str(artifacts), "LAUNCHER": launcher,
           "JOB_TIMEOUT": "30m", "KUBETEST2_RUN_ID": f"scale{uuid.uuid4().hex[:6]}",
           "POD_ANNOTATIONS": ",".join(f"{k}={v}" for k, v in pod_annotations.items()),
           # The kwok nodes advertise their GPUs already, as a cluster whose device plugin runs does;
           # installing it would measure the local DaemonSet controller rolling out 1,000 pods
           # (50 s once, past DISCOVERY_TIMEOUT's 5 min another time), not the harness.
           "INSTALL_DEVICE_PLUGIN": os.environ.get("INSTALL_DEVICE_PLUGIN", "false")}
    command = [str(BINARY), "--test.run=^TestBertTraining$", "--test.v", "--test.timeout=40m"]
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        command = [str(PYTHON.parent / "py-spy"), "record", "--rate", "200", "--format", "raw", "--threads",
                   "--nonblocking", "-o", str(profile / f"{launcher}-{nodes}.txt"), "--", *command]
    pids = component_pids()
    result = RunResult(artifacts=artifacts)
    peaks: dict[str, float] = {}
    stop = threading.Event()
    started = time.perf_counter()
    with open(artifacts / "stdout.txt", "w") as transcript:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   bufsize=1, cwd=REPO)
        result.marks["start"] = Mark(0.0, 0.0, 0.0, components_cpu(pids))
        threading.Thread(target=_sample, args=(pids, peaks, result.cpu_samples, process, started, stop),
                         daemon=True).start()
        assert process.stdout is not None
        for line in process.stdout:
            now = time.perf_counter() - started
            transcript.write(f"{now:9.3f} {line}")
            _mark(result, process.pid, pids, line.rstrip("\n"), now)
        _, status, usage = os.wait4(process.pid, 0)
    stop.set()
    result.marks["exit"] = Mark(time.perf_counter() - started, usage.ru_utime + usage.ru_stime,
                                usage.ru_maxrss / 1024, components_cpu(pids))
    result.rc = os.waitstatus_to_exitcode(status)
    # VmHWM of the binary at its last line, not ru_maxrss: a forked child's ru_maxrss also counts
    # the forking process's memory (this bench's) at the fork.
    result.cpu = usage.ru_utime + usage.ru_stime
    result.peak_rss_mib = max(mark.hwm_mib for mark in result.marks.values())
    result.cluster_peak_rss = peaks
    _read_junit(result, artifacts / "junit_e2e-nvidia-training.xml")
    return result


def _mark(result: RunResult, pid: int, pids: dict[str, list[int]], line: str, now: float) -> None:
    for name, pattern in MARKS:
        if name not in result.marks and pattern.search(line):
            with contextlib.suppress(OSError):
                result.marks[name] = Mark(now, proc_cpu(pid), proc_status_mib(pid, "VmRSS"), components_cpu(pids),
                                          proc_status_mib(pid, "VmHWM"))
                if name == "finished":  # the last moment /proc/<pid>/io is there to read
                    result.rchar = proc_read_bytes(pid)
            return


def _read_junit(result: RunResult, path: Path) -> None:
    if not path.exists():
        result.outcome = "no JUnit"
        return
    result.junit_bytes = path.stat().st_size
    root = ET.parse(path).getroot()
    case = root.find(".//testcase")
    result.properties = {p.get("name") or "": p.get("value") or "" for p in root.iter("property")}
    result.outcome = "PASS"
    for tag in ("failure", "error", "skipped"):
        element = case.find(tag) if case is not None else None
        if element is not None:
            result.outcome = f"{tag.upper()}: {(element.get('message') or '')[:160]}"


# `python -m harness.report ARTIFACTS`, then its own peak RSS on the last line of stderr.
REPORT_AND_PEAK = """
import re, runpy, sys
sys.argv = ["harness.report", sys.argv[1]]
try:
    runpy.run_module("harness.report", run_name="__main__")
except SystemExit as done:
    code = done.code
status = open("/proc/self/status").read()
print(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1), file=sys.stderr)
sys.exit(code)
"""


def time_report(artifacts: Path) -> dict[str, float]:
    """`python -m harness.report ARTIFACTS` in a fresh process: wall, CPU, peak RSS, page size."""
    started = time.perf_counter()
    process = subprocess.Popen([str(PYTHON), "-c", REPORT_AND_PEAK, str(artifacts)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, cwd=REPO, text=True)
    assert process.stderr is not None
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    page = artifacts / "report.html"
    peak_kib = errors.strip().splitlines()[-1] if errors.strip() else "0"
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": int(peak_kib) / 1024 if peak_kib.isdigit()
            else 0.0, "bytes": page.stat().st_size if page.exists() else 0, "rc": os.waitstatus_to_exitcode(status)}


def _wait_quiet(kubeconfig: str, timeout: float = 600) -> None:
    """Until no namespace is terminating: a previous run's pods still being deleted is load."""
    from harness.cluster.client import Cluster
    from harness.cluster.resources import NAMESPACE

    cluster = Cluster.connect(kubeconfig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(n["status"].get("phase") == "Terminating" for n in cluster.list(NAMESPACE)["items"]):
            return
        time.sleep(2)
    progress("a namespace is still terminating; going on")


# ---------------------------------------------------------------------------------------------
# Figures


@dataclass
class Row:
    """One figure of one size, for the table and the growth fit."""

    metric: str
    unit: str
    value: float | None


def phase_rows(result: RunResult) -> list[Row]:
    rows = []
    for phase, (begin, end) in PHASES.items():
        a, b = result.marks.get(begin), result.marks.get(end)
        rows.append(Row(f"{phase}.wall", "s", b.wall - a.wall if a and b else None))
        rows.append(Row(f"{phase}.cpu", "s", b.cpu - a.cpu if a and b and end != "start" else None))
    return rows


def emit_run(launcher: str, nodes: int, result: RunResult, report: dict[str, float], load: str,
             run_seconds: float) -> list[Row]:
    """Print a run's figures; return the rows of its table column."""
    prefix = f"scale.{launcher}.nodes_{nodes}"
    pods = nodes + (1 if launcher == "mpi" else 0)
    emit(f"{prefix}.outcome", result.outcome, "", f"exit {result.rc}; {pods} pods, {nodes * GPUS_PER_NODE} ranks; "
         f"load {load}")
    rows = phase_rows(result)
    rows += [
        Row("report.wall", "s", report["wall"]), Row("report.cpu", "s", report["cpu"]),
        Row("report.peak_rss", "MiB", report["rss"]), Row("report.size", "MB", report["bytes"] / 1e6),
        Row("harness.cpu", "s", result.cpu), Row("harness.peak_rss", "MiB", result.peak_rss_mib),
        Row("harness.api_requests", "", _number(result.properties.get("api-requests"))),
        Row("harness.read", "MiB", result.rchar / 2**20),
        Row("logs.captured", "MiB", (_number(result.properties.get("logs.bytes")) or 0) / 2**20),
        Row("junit.size", "MB", result.junit_bytes / 1e6),
    ]
    done, decided = result.marks.get("done"), result.marks.get("teardown")
    rows.append(Row("verdict_after_done.wall", "s", decided.wall - done.wall if done and decided else None))
    started = _number(result.properties.get("phase.pods_started.seconds"))
    rows.append(Row("pods_started_rate", "pods/s", nodes / started if started else None))
    idle = idle_cpu_rate(result, run_seconds)
    rows.append(Row("wait_idle.cpu_per_s", "ms/s", idle * 1000 if idle is not None else None))
    capture_begin, capture_end = result.marks.get("done"), result.marks.get("captured")
    if capture_begin and capture_end:
        for name in ("kwok", "kube-apiserver"):
            cpu = capture_end.cluster_cpu.get(name, 0.0) - capture_begin.cluster_cpu.get(name, 0.0)
            rows.append(Row(f"log_capture.{name}_cpu", "s", cpu))
    begin, end = result.marks["start"], result.marks["exit"]
    for name in COMPONENTS:
        rows.append(Row(f"cluster.{name}.cpu", "s", end.cluster_cpu.get(name, 0.0) - begin.cluster_cpu.get(name, 0.0)))
        rows.append(Row(f"cluster.{name}.peak_rss", "MiB", result.cluster_peak_rss.get(name)))
    for row in rows:
        if row.value is not None:
            emit(f"{prefix}.{row.metric}", row.value, row.unit)
    return rows


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def growth(sizes: list[int], values: list[float | None]) -> float | None:
    """The exponent b of value ~ size^b: least squares of log(value) on log(size)."""
    points = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True) if v and v > 0]
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


def print_table(title: str, sizes: list[int], columns: dict[int, list[Row]], size_label: str) -> None:
    """Markdown table: a row per metric, a column per size, the exponent fitted over every size,
    then the exponent between the two largest (fixed costs weigh on the first, not the second)."""
    metrics = list(dict.fromkeys(row.metric for rows in columns.values() for row in rows))
    units = {row.metric: row.unit for rows in columns.values() for row in rows}
    print(f"\n{title}\n")
    last = f"{sizes[-2]}->{sizes[-1]}" if len(sizes) > 1 else "-"
    print(f"| figure | {' | '.join(f'{s} {size_label}' for s in sizes)} | growth, all | growth, {last} |")
    print("|---|" + "---|" * (len(sizes) + 2))
    for metric in metrics:
        values = [next((r.value for r in columns[s] if r.metric == metric), None) for s in sizes]
        shown = [f"{v:.3g}" if v is not None else "-" for v in values]
        unit = f" ({units[metric]})" if units[metric] else ""
        exponents = [growth(sizes, values), growth(sizes[-2:], values[-2:])]
        print(f"| {metric}{unit} | {' | '.join(shown)} | "
              + " | ".join(f"{e:.2f}" if e is not None else "-" for e in exponents) + " |")
    print(flush=True)


def emit_growth(prefix: str, sizes: list[int], columns: dict[int, list[Row]]) -> None:
    metrics = list(dict.fromkeys(row.metric for rows in columns.values() for row in rows))
    for metric in metrics:
        values = [next((r.value for r in columns[s] if r.metric == metric), None) for s in sizes]
        exponent, last = growth(sizes, values), growth(sizes[-2:], values[-2:])
        if exponent is not None:
            emit(f"{prefix}.growth.{metric}", exponent, "", "exponent b of value ~ size^b (1: linear), every size"
                 + (f"; {last:.2f} between the two largest" if last is not None else ""))


# ---------------------------------------------------------------------------------------------
# On the cluster


def bench_cluster_sizes(kubeconfig: str, sizes: list[int], launchers: list[str], run_duration: str,
                        profile: Path | None) -> None:
    from harness.config.values import parse_duration

    tables: dict[str, dict[int, list[Row]]] = {launcher: {} for launcher in launchers}
    for nodes in sizes:
        set_gpu_nodes(kubeconfig, nodes)
        for launcher in launchers:
            _wait_quiet(kubeconfig)
            with canned_logs(launcher, nodes) as annotations:
                load = load_average()
                progress(f"TestBertTraining, {launcher}, {nodes} nodes x {GPUS_PER_NODE} ranks (load {load})")
                result = run_binary(kubeconfig, launcher, nodes, annotations, run_duration, profile)
            assert result.artifacts is not None
            report = time_report(result.artifacts)
            tables[launcher][nodes] = emit_run(launcher, nodes, result, report, load, parse_duration(run_duration))
            shutil.rmtree(result.artifacts, ignore_errors=True)
    for launcher, columns in tables.items():
        done = [s for s in sizes if s in columns]
        emit_growth(f"scale.{launcher}", done, columns)
        print_table(f"On the local cluster, {launcher} (TestBertTraining, {GPUS_PER_NODE} ranks per node)", done,
                    columns, "nodes")


# ---------------------------------------------------------------------------------------------
# Offline: the test's own code on logs already on disk


def offline_child(launcher: str, nodes: int, logs: Path, artifacts: Path) -> dict[str, Any]:
    """In a fresh process: TestBertTraining's assessment on captured logs (no cluster), then the
    JUnit; each phase's wall, CPU and the peak RSS."""
    from harness.cluster.cancel import CancelToken
    from harness.config.settings import Origin, Source, resolve
    from harness.config.topology import NodeInfo, Topology
    from harness.framework.cli import parse_args
    from harness.framework.context import Output, RunContext, TestContext
    from harness.framework.suite import Selector
    from harness.jobs.assessment import assess
    from harness.jobs.job import Job, placement_for
    from harness.jobs.launchers import LAUNCHERS as HARNESS_LAUNCHERS
    from harness.jobs.workload import Workload
    from harness.report.junit import write_junit
    from testbins.e2e_nvidia_training import SUITE

    timings: dict[str, tuple[float, float]] = {}

    @contextlib.contextmanager
    def timed(phase: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        timings[phase] = (time.perf_counter() - wall, time.process_time() - cpu)

    cfg = resolve(parse_args(["--test.run=^TestBertTraining$"]), {"ARTIFACTS": str(artifacts)})
    generated = {name: Origin(Source.DERIVED, "bench/scale.py offline")
                 for name in ("node_type", "node_count", "gpus_per_node", "efa_per_node")}
    node_infos = tuple(NodeInfo(f"kwok-gpu-{i}", "p4d.24xlarge", GPUS_PER_NODE, 0, True) for i in range(nodes))
    session = RunContext("e2e-nvidia-training", cfg, artifacts, CancelToken(), Output(False), Selector.from_config(cfg),
                      topology=Topology("p4d.24xlarge", node_infos, GPUS_PER_NODE, 0, generated))
    pods, captured = _offline_pods(launcher, nodes, logs)

    def test(t: TestContext) -> None:
        placement = placement_for(t, "offline", Workload("bert-training", "workloads.bert"))
        job = Job(t, Workload("bert-training", "workloads.bert"), HARNESS_LAUNCHERS[launcher], placement)
        job.pods_seen.update((pod["metadata"]["name"], pod) for pod in pods)
        job._captured = captured
        with timed("log_excerpts"):
            job._show_excerpts(logs)
        with timed("parse"):
            metrics = job.metrics()
        job.metrics = lambda: metrics  # type: ignore[method-assign]  # the test's own call: parsed above
        with timed("verdict"):
            assess(t, job, "bert")

    TestContext(session, "TestBertTraining").execute(test)
    with timed("junit"):
        write_junit(SUITE.junit_path(artifacts), SUITE.binary, session.results, {"tester-version": "bench"})
    return {"timings": timings, "outcome": session.results[0].outcome.value,
            "message": session.results[0].message[:200],
            "peak_rss_mib": proc_status_mib(os.getpid(), "VmHWM"),
            "junit_bytes": SUITE.junit_path(artifacts).stat().st_size}


def _offline_pods(launcher: str, nodes: int, logs: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Pods as the wait saw them and their logs as capture_pod_logs left them (header line first)."""
    from harness.cluster.logs import CapturedLog

    pods, captured = [], []
    for i in range(nodes):
        name = f"bert-training-worker-{i}" if launcher == "mpi" else f"bert-training-{i}-x{i:05d}"
        annotations = {} if launcher == "mpi" else {"batch.kubernetes.io/job-completion-index": str(i)}
        pods.append({"metadata": {"name": name, "annotations": annotations},
                     "spec": {"nodeName": f"kwok-gpu-{i}"}, "status": {"phase": "Succeeded"}})
    names = [p["metadata"]["name"] for p in pods] + (["bert-training-launcher-abcde"] if launcher == "mpi" else [])
    for name in names:
        path = logs / f"{name}.log"
        captured.append(CapturedLog(name, "kwok-gpu-0", "worker", path, size=path.stat().st_size))
    return pods, captured


def write_offline_logs(launcher: str, nodes: int, logs: Path) -> int:
    """The logs as capture_pod_logs writes them: a header line, then the container's output."""
    logs.mkdir(parents=True, exist_ok=True)
    scratch = logs / "generated"
    scratch.mkdir()
    if launcher == "torchrun":
        total = scale_logs.write_pod_logs(scratch, "pod", nodes, GPUS_PER_NODE)
        sources = {f"bert-training-{i}-x{i:05d}": scratch / f"pod-{i}.log" for i in range(nodes)}
    else:
        total = scale_logs.write_launcher_log(scratch / "launcher.log", nodes, GPUS_PER_NODE)
        (scratch / "worker.log").write_text(scale_logs.WORKER_LOG)
        sources = {f"bert-training-worker-{i}": scratch / "worker.log" for i in range(nodes)}
        sources["bert-training-launcher-abcde"] = scratch / "launcher.log"
    for name, source in sources.items():
        with open(logs / f"{name}.log", "wb") as out, open(source, "rb") as src:
            out.write(f"=== pod {name} | node kwok-gpu-0 | container worker\n".encode())
            shutil.copyfileobj(src, out)
    shutil.rmtree(scratch)
    return total


def bench_offline(sizes: list[int], launchers: list[str]) -> None:
    for launcher in launchers:
        columns: dict[int, list[Row]] = {}
        for nodes in sizes:
            with tempfile.TemporaryDirectory(prefix=f"offline-{launcher}-{nodes}-", dir=WORK) as folder:
                artifacts = Path(folder) / "artifacts"
                logs = artifacts / "e2e-nvidia-training" / "TestBertTraining" / "logs"
                total = write_offline_logs(launcher, nodes, logs)
                result = subprocess.run([str(PYTHON), __file__, "_offline", launcher, str(nodes), str(logs),
                                         str(artifacts)], capture_output=True, text=True, check=False, cwd=REPO)
                if result.returncode != 0:
                    raise SystemExit(f"offline child failed:\n{result.stderr[-4000:]}")
                child = json.loads(result.stdout.strip().splitlines()[-1])
                report = time_report(artifacts)
            prefix = f"scale.offline.{launcher}.ranks_{nodes * GPUS_PER_NODE}"
            emit(f"{prefix}.outcome", child["outcome"], "", f"{child['message']}; {total / 2**20:.1f} MiB of logs; "
                 f"load {load_average()}")
            rows = [Row(f"{phase}.{kind}", "s", value[i]) for phase, value in child["timings"].items()
                    for i, kind in enumerate(("wall", "cpu"))]
            rows += [Row("report.wall", "s", report["wall"]), Row("report.cpu", "s", report["cpu"]),
                     Row("report.peak_rss", "MiB", report["rss"]), Row("report.size", "MB", report["bytes"] / 1e6),
                     Row("peak_rss", "MiB", child["peak_rss_mib"]), Row("junit.size", "MB", child["junit_bytes"] / 1e6),
                     Row("logs", "MiB", total / 2**20)]
            for row in rows:
                emit(f"{prefix}.{row.metric}", row.value or 0.0, row.unit)
            columns[nodes * GPUS_PER_NODE] = rows
        ranks = [n * GPUS_PER_NODE for n in sizes]
        emit_growth(f"scale.offline.{launcher}", ranks, columns)
        print_table(f"Offline (generated logs, no cluster), {launcher}: parse, verdict, JUnit, report", ranks,
                    columns, "ranks")


# ---------------------------------------------------------------------------------------------


def main() -> None:
    if sys.argv[1:2] == ["_offline"]:
        launcher, nodes, logs, artifacts = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
        print(json.dumps(offline_child(launcher, nodes, logs, artifacts)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modes", nargs="*", help="cluster, offline (default: both)")
    parser.add_argument("--nodes", default=",".join(map(str, SIZES)), help="node counts (default 8,64,256,1000)")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS), help="torchrun,mpi (default both)")
    parser.add_argument("--run-duration", default="10s", help="how long each canned pod runs (Go duration)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench cluster running")
    parser.add_argument("--profile", type=Path, help="cluster: run the binary under py-spy (pip install py-spy), "
                        "folded stacks of every thread into this folder; its CPU figures then include py-spy's")
    args = parser.parse_args()
    modes = args.modes or ["cluster", "offline"]
    if set(modes) - {"cluster", "offline"}:
        parser.error(f"unknown modes {sorted(set(modes) - {'cluster', 'offline'})}; choose cluster or offline")
    sizes = sorted(int(n) for n in args.nodes.split(","))
    launchers = [name for name in args.launchers.split(",") if name]
    unknown = set(launchers) - set(LAUNCHERS)
    if unknown:
        parser.error(f"unknown launchers {sorted(unknown)}; choose from {', '.join(LAUNCHERS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    progress(f"load average {load_average()}")
    if "offline" in modes:
        bench_offline(sizes, launchers)
    if "cluster" in modes:
        with CLUSTER.up(args.keep_cluster) as kubeconfig:
            bench_cluster_sizes(kubeconfig, sizes, launchers, args.run_duration, args.profile)


if __name__ == "__main__":
    main()
