"""Harness benchmarks on a local cluster of its own: start-up, verdict latency, log capture at
scale, API requests per test, CPU time of a 256-pod job. One `name: value unit` line per figure.

    .venv/bin/python bench/harness_costs.py                    # every figure (about 9 minutes)
    .venv/bin/python bench/harness_costs.py startup verdict    # some of them
    .venv/bin/python bench/harness_costs.py cpu --profile      # with a pyinstrument profile (pip install pyinstrument)

The cluster is a local cluster of its own (`KT2T_STATE=/tmp/kt2t-bench/cluster KT2T_PORT_OFFSET=300`
unless KT2T_STATE and KT2T_PORT_OFFSET are set), never the default one other sessions test on; it
is brought down at the end (`--keep-cluster` leaves it running for the next invocation). The 1 MiB
canned log the log figures use, `localcluster/emulation/canned_logs/bench-1mib.log`, is written at start and removed
at the end. Run it with the project's venv: it imports the installed `harness` package.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_common import BenchCluster, emit, progress

from harness.cluster.client import Cluster
from harness.cluster.conditions import any_pod_failed, deleted, job_failed, job_succeeded, node_not_ready, pods_ready
from harness.cluster.logs import capture_pod_logs
from harness.cluster.resources import JOB, NAMESPACE, NODE, POD, Obj
from harness.cluster.wait import wait_for
from harness.errors import JobFailed

REPO = Path(__file__).resolve().parents[1]

PYTHON = Path(sys.executable)
BINARY = PYTHON.parent / "e2e-nvidia-training"
WORK = Path("/tmp/kt2t-bench")
# The bench's own cluster; KT2T_STATE and KT2T_PORT_OFFSET in the environment choose another.
CLUSTER = BenchCluster.from_env(WORK / "cluster", 300)
CANNED_LOG = REPO / "localcluster" / "emulation" / "canned_logs" / "bench-1mib.log"
ANNOTATION = "kubetest2-training.local"
# The canned log of the binary's pods: the node agent runs pods for real unless one is named.
BERT_LOG = "bert-mpirun-32ranks"
FIGURES = ("startup", "verdict", "requests", "logs", "cpu")
LOG_PODS = 256
CPU_NODES = 256


def set_nodes(count: int) -> None:
    progress(f"hack/local-cluster nodes --shape cpu --count {count}")
    CLUSTER.run("nodes", "--shape", "cpu", "--count", str(count))


@contextlib.contextmanager
def bench_namespace(cluster: Cluster, prefix: str) -> Iterator[str]:
    name = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.ensure_namespace(name, {"app.kubernetes.io/managed-by": "kubetest2-training-bench"})
    try:
        yield name
    finally:
        cluster.delete(NAMESPACE, name)


@contextlib.contextmanager
def canned_log_1mib() -> Iterator[str]:
    """localcluster/emulation/canned_logs/bench-1mib.log: 1 MiB of ~100-byte lines (the node agent serves it)."""
    lines, size, i = [], 0, 0
    while size < 1024 * 1024:
        line = f"bench line {i:07d} step={i} loss={1 / (i + 1):.6f} " + "x" * 50
        lines.append(line)
        size += len(line) + 1
        i += 1
    CANNED_LOG.write_text("\n".join(lines) + "\n")
    try:
        yield CANNED_LOG.stem
    finally:
        CANNED_LOG.unlink(missing_ok=True)


def median(values: list[float]) -> float:
    return statistics.median(values)


# ---------------------------------------------------------------------------------------------
# 1. start-up: --help and --test.list (kubetest2 probes --help before every run)


def bench_startup(repeats: int) -> None:
    commands = {"startup.help": [str(BINARY), "--help"], "startup.list": [str(BINARY), "--test.list=."]}
    # An unreachable kubeconfig: an answer proves no cluster was contacted.
    env = {**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig"}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):  # interleaved, so machine noise hits both alike
        for name, command in commands.items():
            started = time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - started)
    for name, values in times.items():
        emit(name, median(values), "s", f"median of {repeats}, min {min(values):.3f} s")


# ---------------------------------------------------------------------------------------------
# 2. verdict latency: a status change (PATCHed here, t0) -> wait_for returns or raises (t1)


def _patch_status(cluster: Cluster, path: str, status: Obj) -> None:
    cluster.request("PATCH", path + "/status", body={"status": status}, content_type="application/merge-patch+json")


def _failed_pod_status() -> Obj:
    return {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "c",
                "image": "x",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
            }
        ],
    }


def _complete_job_status() -> Obj:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "startTime": now,
        "completionTime": now,
        "succeeded": 1,
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": now}
            for t in ("SuccessCriteriaMet", "Complete")
        ],
    }


def _one_verdict(
    cluster: Cluster, namespace: str, nodes: list[str], i: int, change: Callable[[], None], expect: str
) -> float:
    """Wait as Job.wait_succeeded does (job, its pods, the nodes); once every watch is
    open, another thread makes the change; returns the seconds from just before the change's
    PATCH to wait_for's return or raise."""
    name = f"job-{i}"
    t0: list[float] = []
    armed = threading.Event()

    def make_change() -> None:
        time.sleep(0.3)  # let the watches open (they resume from the list either way)
        t0.append(time.perf_counter())
        change()

    def on_event(_state: object) -> None:
        if not armed.is_set():
            armed.set()
            threading.Thread(target=make_change, daemon=True).start()

    fails_on = [job_failed(namespace, name), any_pod_failed(namespace, f"bench-job={name}", 600), node_not_ready(nodes)]
    try:
        verdict = wait_for(cluster, job_succeeded(namespace, name), fails_on=fails_on, timeout=30, on_event=on_event)
    except JobFailed as exc:
        verdict = f"failed: {exc}"
    t1 = time.perf_counter()
    if expect not in verdict:
        raise SystemExit(f"verdict bench: expected {expect!r}, got {verdict!r}")
    return t1 - t0[0]


def bench_verdict(kubeconfig: str, repeats: int) -> None:
    cluster, patcher = Cluster.connect(kubeconfig), Cluster.connect(kubeconfig)
    nodes = [n["metadata"]["name"] for n in cluster.list(NODE).get("items", [])]
    pod_failed, job_complete = [], []
    with bench_namespace(cluster, "verdict") as ns:
        for i in range(repeats):
            name = f"job-{i}"
            # A Job no controller acts on (suspended, managed by nobody) and an unschedulable pod
            # of it: only the PATCHes below change them.
            cluster.apply(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "suspend": True,
                        "managedBy": "bench.local/nobody",
                        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}},
                    },
                }
            )
            cluster.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{name}-pod", "namespace": ns, "labels": {"bench-job": name}},
                    "spec": {"nodeSelector": {"bench.local/none": "true"}, "containers": [{"name": "c", "image": "x"}]},
                }
            )
            pod_failed.append(
                _one_verdict(
                    cluster,
                    ns,
                    nodes,
                    i,
                    lambda n=name: _patch_status(patcher, POD.object_path(f"{n}-pod", ns), _failed_pod_status()),
                    "exited with code 3",
                )
            )
            cluster.delete(POD, f"{name}-pod", ns)
            wait_for(cluster, deleted(POD, f"{name}-pod", ns), timeout=30)
            job_complete.append(
                _one_verdict(
                    cluster,
                    ns,
                    nodes,
                    i,
                    lambda n=name: _patch_status(patcher, JOB.object_path(n, ns), _complete_job_status()),
                    f"job {name} succeeded",
                )
            )
    for name, values in (("verdict.pod_failed", pod_failed), ("verdict.job_complete", job_complete)):
        emit(
            name,
            median(values),
            "s",
            f"median of {repeats}, max {max(values):.3f} s; t0 before the status PATCH is sent",
        )


# ---------------------------------------------------------------------------------------------
# 3. log capture: 256 pods x 1 MiB


def _capture_child(args: argparse.Namespace) -> None:
    """In a fresh process: capture the logs of the first `--limit` pods; print wall and peak RSS."""
    cluster = Cluster.connect(args.kubeconfig)
    pods = sorted(
        cluster.list(POD, args.namespace, label_selector=args.selector)["items"], key=lambda p: p["metadata"]["name"]
    )[: args.limit]
    rss_before = _proc_status_kib("VmRSS")
    cpu_before, started = time.process_time(), time.perf_counter()
    captured = capture_pod_logs(cluster, args.namespace, pods, Path(args.dest), workers=args.workers)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    errors = [c.error for c in captured if c.error]
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": cpu,
                "pods": len(pods),
                "bytes": sum(c.size for c in captured),
                "rss_before_kib": rss_before,
                "hwm_kib": _proc_status_kib("VmHWM"),
                "errors": errors[:3],
            }
        )
    )


def _proc_status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(match.group(1)) if match else -1


def _run_capture(kubeconfig: str, namespace: str, selector: str, limit: int, workers: int | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="capture-", dir=WORK) as dest:
        command = [
            str(PYTHON),
            __file__,
            "_capture",
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            namespace,
            "--selector",
            selector,
            "--limit",
            str(limit),
            "--dest",
            dest,
        ]
        if workers:
            command += ["--workers", str(workers)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:
            raise SystemExit(f"capture child failed:\n{result.stderr}")
        return json.loads(result.stdout.strip().splitlines()[-1])


def _create_log_pods(cluster: Cluster, namespace: str, label: str, count: int, canned: str) -> str:
    """`count` bare pods (they run until deleted) serving canned logs; returns their selector."""
    annotations = {f"{ANNOTATION}/canned-log": canned}
    for i in range(count):
        cluster.request(
            "POST",
            POD.collection_path(namespace),
            body={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{label}-{i:03d}", "labels": {"bench": label}, "annotations": annotations},
                "spec": {
                    "automountServiceAccountToken": False,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "main", "image": "bench"}],
                },
            },
        )
    return f"bench={label}"


def bench_logs(kubeconfig: str, pods: int, repeats: int) -> None:
    """capture_pod_logs of 1 and of `pods` pods: 1 MiB logs (bytes-bound) and 3.7 kB (request-bound)."""
    cluster = Cluster.connect(kubeconfig)
    with canned_log_1mib() as canned, bench_namespace(cluster, "logs") as ns:
        progress(f"creating {pods} pods with 1 MiB logs and {pods} with the default 3.7 kB one")
        selector = _create_log_pods(cluster, ns, "logs", pods, canned)
        small = _create_log_pods(cluster, ns, "small", pods, BERT_LOG)
        wait_for(cluster, pods_ready(ns, "bench in (logs,small)", 2 * pods), timeout=300)
        progress("pods ready; capturing")
        one_small = [_run_capture(kubeconfig, ns, small, 1)["wall"] for _ in range(repeats)]
        all_small = [_run_capture(kubeconfig, ns, small, pods)["wall"] for _ in range(repeats // 2 or 1)]
        emit("logs.small.one_pod.wall", median(one_small), "s", f"3.7 kB log; median of {repeats}")
        emit(f"logs.small.{pods}_pods.wall", median(all_small), "s", f"3.7 kB logs; median of {len(all_small)}")
        emit(f"logs.small.{pods}_pods.ratio_to_one_pod", median(all_small) / median(one_small), "x")
        one = [_run_capture(kubeconfig, ns, selector, 1)["wall"] for _ in range(repeats)]
        results = [_run_capture(kubeconfig, ns, selector, pods) for _ in range(max(1, repeats // 2))]
        best = min(results, key=lambda r: r["wall"])
        all_wall = median([r["wall"] for r in results])
        assert best["bytes"] >= pods * 1024 * 1024 and not best["errors"], best
        emit("logs.one_pod.wall", median(one), "s", f"median of {repeats}, fresh process each")
        emit(
            f"logs.{pods}_pods.wall",
            all_wall,
            "s",
            f"median of {len(results)}; {best['bytes'] / 2**20:.0f} MiB, {best['bytes'] / 2**20 / all_wall:.0f} MiB/s",
        )
        emit(f"logs.{pods}_pods.ratio_to_one_pod", all_wall / median(one), "x")
        emit(f"logs.{pods}_pods.client_cpu", best["cpu"], "s", "CPU of the capturing process while capturing")
        emit(
            f"logs.{pods}_pods.peak_rss",
            max(r["hwm_kib"] for r in results) / 1024,
            "MiB",
            f"VmHWM of the capturing process; {best['rss_before_kib'] / 1024:.0f} MiB before capturing",
        )
        sequential = _run_capture(kubeconfig, ns, selector, pods, workers=1)
        emit(f"logs.{pods}_pods.sequential_python.wall", sequential["wall"], "s", "capture_pod_logs(workers=1)")
        names = [f"logs-{i:03d}" for i in range(pods)]  # as _create_log_pods names them
        with tempfile.TemporaryDirectory(prefix="kubectl-", dir=WORK) as dest:
            started = time.perf_counter()
            for name in names:
                with open(Path(dest) / f"{name}.log", "wb") as out:
                    subprocess.run(
                        ["kubectl", "--kubeconfig", kubeconfig, "logs", "-n", ns, name],
                        stdout=out,
                        check=True,
                        timeout=60,
                    )
            emit(
                f"logs.{pods}_pods.sequential_kubectl.wall",
                time.perf_counter() - started,
                "s",
                "one `kubectl logs` per pod, one after the other",
            )


# ---------------------------------------------------------------------------------------------
# 4 and 5. the binary against the cluster: API requests and CPU time


def _apiserver_requests(cluster: Cluster) -> dict[str, float]:
    """apiserver_request_total by `verb resource[/subresource]`, from /metrics."""
    response = cluster.open_stream("/metrics", {}, read_timeout=30)
    totals: dict[str, float] = {}
    for line in response.data.decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = f"{labels.get('verb')} {labels.get('resource')}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            totals[key] = totals.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return totals


def _diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def run_binary(kubeconfig: str, env: dict[str, str], profile: Path | None = None) -> dict[str, Any]:
    """e2e-nvidia-training --test.run=TestBertTraining; wall, user+sys CPU and its JUnit."""
    artifacts = Path(tempfile.mkdtemp(prefix="artifacts-", dir=WORK))
    command = [str(BINARY)]
    if profile is not None:
        command = [
            str(PYTHON),
            "-m",
            "pyinstrument",
            "--show-all",
            "-r",
            "text",
            "-o",
            str(profile),
            "-m",
            "testbins.e2e_nvidia_training",
        ]
    command += [f"--kubeconfig={kubeconfig}", "--test.run=TestBertTraining", "--test.v", "--test.timeout=5m"]
    full_env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "ARTIFACTS": str(artifacts),
        "ACCELERATOR": "cpu",
        "WORKLOAD_SIZE": "tiny",
        "JOB_TIMEOUT": "4m",
        **env,
    }
    started = time.perf_counter()
    with open(artifacts / "stdout.txt", "wb") as out:
        process = subprocess.Popen(command, env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    junit = ET.parse(artifacts / "junit_e2e-nvidia-training.xml").getroot()
    properties = {p.get("name"): p.get("value") for p in junit.iter("property")}
    case = junit.find(".//testcase")
    outcome = "PASS"
    for tag in ("failure", "error", "skipped"):
        element = case.find(tag) if case is not None else None
        if element is not None:
            outcome = f"{tag.upper()}: {(element.get('message') or '')[:120]}"
    result = {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "rc": process.returncode,
        "outcome": outcome,
        "api_requests": int(properties.get("api-requests", -1)),
        "job_seconds": properties.get("job.seconds"),
        "artifacts": artifacts,
    }
    return result


def _wait_quiet(cluster: Cluster) -> None:
    """Until no bench or test namespace is terminating (their pods' deletion is API traffic)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        namespaces = cluster.list(NAMESPACE)["items"]
        if not any(n["status"].get("phase") == "Terminating" for n in namespaces):
            return
        time.sleep(1)


def bench_requests(kubeconfig: str) -> None:
    """TestBertTraining with pods that run 2 s and 20 s on 2 nodes, and 2 s on 8 nodes."""
    cluster = Cluster.connect(kubeconfig)
    _wait_quiet(cluster)
    idle_before, idle_seconds = _apiserver_requests(cluster), 15.0
    time.sleep(idle_seconds)
    idle_rate = sum(_diff(_apiserver_requests(cluster), idle_before).values()) / idle_seconds
    emit("requests.idle_cluster_rate", idle_rate, "requests/s", "the cluster's own clients, no test running")
    for nodes, duration in ((2, "2s"), (2, "20s"), (8, "2s")):
        progress(f"TestBertTraining on {nodes} nodes, pods running {duration}")
        _wait_quiet(cluster)
        before = _apiserver_requests(cluster)
        result = run_binary(
            kubeconfig,
            {
                "NODE_COUNT": str(nodes),
                "POD_ANNOTATIONS": f"{ANNOTATION}/canned-log={BERT_LOG},{ANNOTATION}/run-duration={duration}",
            },
        )
        delta = _diff(_apiserver_requests(cluster), before)
        shutil.rmtree(result["artifacts"], ignore_errors=True)
        prefix = f"requests.pods_{nodes}.run_{duration}"
        emit(f"{prefix}.wall", result["wall"], "s", f"{result['outcome']}; job {result['job_seconds']} s")
        emit(
            f"{prefix}.harness",
            result["api_requests"],
            "requests",
            "counted by the harness's client (JUnit property api-requests)",
        )
        total = sum(delta.values())
        net = total - idle_rate * result["wall"]
        emit(
            f"{prefix}.apiserver",
            int(total),
            "requests",
            f"apiserver_request_total delta, all clients; minus the idle rate: {net:.0f}",
        )
        top = sorted(delta.items(), key=lambda kv: -kv[1])[:8]
        progress(f"{prefix} top verb/resource: " + ", ".join(f"{k} {v:.0f}" for k, v in top))


def bench_cpu(kubeconfig: str, nodes: int, profile: bool) -> None:
    """TestBertTraining on `nodes` nodes: with the default canned log (3.7 kB a pod), then 1 MiB."""
    cluster = Cluster.connect(kubeconfig)
    with canned_log_1mib() as canned:
        for label, env in (
            ("", {"POD_ANNOTATIONS": f"{ANNOTATION}/canned-log={BERT_LOG}"}),
            ("_1mib_logs", {"POD_ANNOTATIONS": f"{ANNOTATION}/canned-log={canned}"}),
        ):
            progress(f"TestBertTraining on {nodes} nodes (ACCELERATOR=cpu: one pod per node){label}")
            _wait_quiet(cluster)
            before = _apiserver_requests(cluster)
            result = run_binary(kubeconfig, {"NODE_COUNT": str(nodes), **env})
            delta = sum(_diff(_apiserver_requests(cluster), before).values())
            prefix = f"cpu.pods_{nodes}{label}"
            emit(f"{prefix}.wall", result["wall"], "s", f"{result['outcome']}; job {result['job_seconds']} s")
            emit(
                f"{prefix}.harness_cpu", result["cpu"], "s", f"user {result['user']:.2f} s + sys {result['sys']:.2f} s"
            )
            emit(f"{prefix}.harness_peak_rss", result["peak_rss_mib"], "MiB", "ru_maxrss of the binary")
            emit(
                f"{prefix}.harness_requests",
                result["api_requests"],
                "requests",
                f"JUnit api-requests; apiserver_request_total grew {delta:.0f} (all clients)",
            )
            shutil.rmtree(result["artifacts"], ignore_errors=True)
            if profile:
                out = WORK / f"profile-{nodes}-pods{label}.txt"
                _wait_quiet(cluster)
                prof = run_binary(kubeconfig, {"NODE_COUNT": str(nodes), **env}, profile=out)
                shutil.rmtree(prof["artifacts"], ignore_errors=True)
                emit(f"{prefix}.profile", str(out), "", f"pyinstrument, wall {prof['wall']:.1f} s under the profiler")


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = sys.argv[1:2] == ["_capture"]
    if sub:
        parser.add_argument("mode")
        parser.add_argument("--kubeconfig", required=True)
        parser.add_argument("--namespace", required=True)
        parser.add_argument("--selector", required=True)
        parser.add_argument("--limit", type=int, required=True)
        parser.add_argument("--dest", required=True)
        parser.add_argument("--workers", type=int, default=16)
        _capture_child(parser.parse_args())
        return
    parser.add_argument("figures", nargs="*", help=f"some of {', '.join(FIGURES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=20, help="samples per median (default 20)")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the bench cluster running")
    parser.add_argument("--profile", action="store_true", help="cpu: also a pyinstrument profile")
    args = parser.parse_args()
    figures = args.figures or list(FIGURES)
    unknown = set(figures) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures {sorted(unknown)}; choose from {', '.join(FIGURES)}")
    WORK.mkdir(parents=True, exist_ok=True)
    if "startup" in figures:
        bench_startup(args.repeats)
    rest = [f for f in figures if f != "startup"]
    if not rest:
        return
    with CLUSTER.up(args.keep_cluster) as kubeconfig:
        if {"verdict", "requests"} & set(rest):
            set_nodes(8)
        if "verdict" in rest:
            bench_verdict(kubeconfig, args.repeats)
        if "requests" in rest:
            bench_requests(kubeconfig)
        if {"logs", "cpu"} & set(rest):
            set_nodes(CPU_NODES)
        if "logs" in rest:
            bench_logs(kubeconfig, LOG_PODS, min(args.repeats, 6))
        if "cpu" in rest:
            bench_cpu(kubeconfig, CPU_NODES, args.profile)


if __name__ == "__main__":
    main()
