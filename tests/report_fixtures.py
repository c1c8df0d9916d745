"""Realistic artifacts folders (result.json, JUnit, logs, events) for the report's tests and bench.

Shaped on real runs: the 2-rank CPU run of `hack/main-job` (BERT tiny on kwok-cpu, 29.3 samples/s,
loss 5.28 -> 3.8 over 200 steps), upstream's 32-rank p3.16xlarge BERT run
(tests/fixtures/bert-mpirun-32ranks.log gives the per-rank throughputs) with one node slowed, an
OOMKilled pod, an nccl-tests all_reduce_perf sweep against the H100 single-node floor
(docs: REFERENCE.md, performance anchors), a skip, a harness error, and 256 ranks.
The JUnit files are written by the harness's own writer. Deterministic (seeded).

    python tests/report_fixtures.py OUT [SCENARIO...]    # one folder per scenario, with its report.html
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.report.junit import CaseResult, Outcome, write_junit  # noqa: E402

UPSTREAM_32_RANKS = REPO / "tests" / "fixtures" / "bert-mpirun-32ranks.log"
START = datetime(2026, 11, 30, 21, 32, 44, tzinfo=timezone.utc)
HOSTILE = "</script><script>alert(1)</script><img src=http://example.com/x.png>"


@dataclass
class FixtureTest:
    """One test's artifacts: its result.json (None: the harness wrote none) and its files."""

    binary: str
    name: str
    outcome: str
    elapsed_s: float
    message: str = ""
    detail: str = ""
    result: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)  # path in the test's folder -> text
    properties: dict[str, str] = field(default_factory=dict)  # JUnit <properties>


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- building blocks ----

def config(node_type: str, node_count: int, gpus: int, accelerator: str, **extra: str) -> dict[str, Any]:
    """The resolved configuration with sources, as the harness reports it."""
    entries = {
        "node_type": (node_type, "discovered", "node.kubernetes.io/instance-type"),
        "node_count": (str(node_count), "discovered", f"Ready {node_type} nodes"),
        "gpus_per_node": (str(gpus), "derived" if accelerator == "cpu" else "discovered",
                          "one process per node with ACCELERATOR=cpu" if accelerator == "cpu" else "nvidia.com/gpu"),
        "accelerator": (accelerator, "env", "ACCELERATOR"),
        "launcher": ("torchrun", "default", ""),
        "job_timeout": ("20m0s", "default", ""),
        "straggler_fraction": ("0.7", "default", ""),
        "training_image": ("kubetest2-training/workloads:latest", "default", ""),
    }
    entries.update({k: (v, "env", k.upper()) for k, v in extra.items()})
    return {k: {"value": v, "source": s, "origin": o} for k, (v, s, o) in entries.items()}


def loss_curve(rng: random.Random, steps: int, first: float, last: float) -> list[list[float]]:
    """A noisy exponential decay from `first` towards `last`."""
    tau = steps / 4
    return [[step, round(last + (first - last) * math.exp(-step / tau) + rng.gauss(0, 0.04 * (first - last)), 4)]
            for step in range(steps)]


def upper_quartile(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, (3 * len(ordered)) // 4)]


def aggregate(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"min": ordered[0], "median": round(median, 4), "max": ordered[-1],
            "mean": round(sum(values) / len(values), 4), "count": len(values)}


@dataclass
class Layout:
    """Where ranks run: node names, pods and ranks per node."""

    nodes: list[str]
    pod_of_node: list[str]
    per_node: int

    def place(self, rank: int) -> tuple[str, str]:
        index = rank // self.per_node
        return self.nodes[index], self.pod_of_node[index]


def ranks(rng: random.Random, layout: Layout, value_of: Callable[[int, str], dict[str, float]],
          steps: int, loss: tuple[float, float]) -> list[dict[str, Any]]:
    """Per-rank records: pod, node, values and the [step, loss] pairs."""
    records = []
    for rank in range(len(layout.nodes) * layout.per_node):
        node, pod = layout.place(rank)
        curve = loss_curve(rng, steps, loss[0] + rng.gauss(0, 0.01), loss[1] + rng.gauss(0, 0.02))
        values = {**value_of(rank, node), "loss_first": curve[0][1], "loss_last": curve[-1][1]}
        records.append({"rank": rank, "pod": pod, "node": node, "values": values, "steps": curve})
    return records


def pod(name: str, node: str, phase: str = "Succeeded", exit_code: int | None = 0, reason: str = "Completed",
        restarts: int = 0, logs: list[str] | None = None, execution: str = "real") -> dict[str, Any]:
    return {"name": name, "node": node, "phase": phase, "execution": execution,
            "containers": [{"name": "worker", "exit_code": exit_code, "reason": reason, "restarts": restarts,
                            "signal": None}],
            "logs": logs if logs is not None else [f"logs/{name}.log"]}


def pod_events(pods: list[dict[str, Any]], job: str, seconds: float) -> list[dict[str, Any]]:
    """Scheduled and Started per pod, the Job's SuccessfulCreate, and Completed at the end."""
    events = []
    for index, entry in enumerate(pods):
        at = START + timedelta(seconds=0.2 + 0.01 * index)
        events += [{"time": iso(at), "type": "Normal", "object": f"Job/{job}", "reason": "SuccessfulCreate",
                    "message": f"Created pod: {entry['name']}"},
                   {"time": iso(at), "type": "Normal", "object": f"Pod/{entry['name']}", "reason": "Scheduled",
                    "message": f"Successfully assigned kt2t-06e83817/{entry['name']} to {entry['node']}"},
                   {"time": iso(at + timedelta(seconds=1)), "type": "Normal", "object": f"Pod/{entry['name']}",
                    "reason": "Started", "message": "Started container worker"}]
    events.append({"time": iso(START + timedelta(seconds=seconds)), "type": "Normal", "object": f"Job/{job}",
                   "reason": "Completed", "message": "Job completed"})
    return events


def events_txt(events: list[dict[str, Any]]) -> str:
    return "".join(f"{e['time']} {e['type']} {e['object']} {e['reason']}: {e['message']}\n" for e in events)


def result(binary: str, test: str, outcome: str, elapsed: float, **fields: Any) -> dict[str, Any]:
    """A result.json object (docs/ARTIFACTS.md, schema 1)."""
    base = {"schema": 1, "binary": binary, "test": test, "outcome": outcome, "message": "", "detail": "",
            "started": iso(START), "elapsed_s": elapsed, "execution": "real", "config": {}, "checks": [],
            "metrics": None, "pods": [], "events": []}
    base.update(fields)
    return base


def worker_logs(records: list[dict[str, Any]], workload: str) -> dict[str, str]:
    """Each pod's log: its ranks' throughput lines and KT2T_METRICS line."""
    logs: dict[str, list[str]] = {}
    for record in records:
        metrics = {"workload": workload, "rank": record["rank"], "node": record["node"], **record["values"]}
        logs.setdefault(f"logs/{record['pod']}.log", []).extend([
            f"Process {record['rank']} - Throughput: {record['values'].get('throughput', 0):.2f} samples/second",
            "KT2T_METRICS " + json.dumps(metrics)])
    return {path: "\n".join(lines) + "\n" for path, lines in logs.items()}


def junit_properties(res: dict[str, Any]) -> dict[str, str]:
    """The JUnit properties the harness writes: config.* and the metrics' aggregates."""
    props = {}
    for name, entry in res["config"].items():
        props[f"config.{name}"] = entry["value"]
        props[f"config.{name}.source"] = f"{entry['source']}: {entry['origin'] or entry['source']}"
    metrics = res.get("metrics") or {}
    if metrics.get("ranks"):
        props["metrics.ranks"] = str(len(metrics["ranks"]))
    for key, stats in (metrics.get("aggregate") or {}).items():
        props.update({f"metrics.{key}.{stat}": f"{value:g}" for stat, value in stats.items()})
    return props


def fixture(res: dict[str, Any], files: dict[str, str]) -> FixtureTest:
    return FixtureTest(res["binary"], res["test"], res["outcome"], res["elapsed_s"], res["message"], res["detail"],
                       res, files, junit_properties(res))


# ---- training runs ----

def training_metrics(records: list[dict[str, Any]], key: str, unit: str, slow: list[int],
                     probe: str | None = None, minimum: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metrics object of a training test: ranks, aggregates, reference lines, slow ranks."""
    keys = [key] + ([probe] if probe else []) + ["loss_first", "loss_last"]
    references = {}
    for name in [key] + ([probe] if probe else []):
        reference = round(upper_quartile([r["values"][name] for r in records]), 3)
        references[name] = {"reference": reference, "threshold": round(reference * 0.7, 3),
                            "how": "upper quartile of the ranks x STRAGGLER_FRACTION (0.7)"}
    if minimum:
        references["minimum"] = minimum
    return {"workload": "bert", "world_size": len(records), "throughput": {"key": key, "unit": unit},
            **({"probe": {"key": probe, "unit": "TFLOP/s"}} if probe else {}),
            "ranks": records, "aggregate": {k: aggregate([r["values"][k] for r in records]) for k in keys},
            "references": references, "slow_ranks": slow, "busbw": None}


def training_checks(node_type: str, straggler: str = "", minimum: str = "") -> list[dict[str, Any]]:
    checks = [{"name": "ranks", "status": "pass", "message": "every rank reported once"},
              {"name": "finite_metrics", "status": "pass", "message": "every metric is finite"},
              {"name": "loss_decreased", "status": "pass", "message": "loss decreased on every rank"},
              {"name": "replicas_agree", "status": "pass", "message": "params_checksum equal on every rank"}]
    checks.append({"name": "throughput_minimum", "status": "pass" if minimum else "not-applicable",
                   "message": minimum or f"no threshold for {node_type} (none until measured)"})
    checks.append({"name": "stragglers", "status": "fail" if straggler else "pass",
                   "message": straggler or "no rank below 70% of the reference"})
    return checks


def passing_cpu_2ranks() -> list[FixtureTest]:
    """hack/main-job's BERT test: 2 ranks on 2 kwok-cpu nodes, trained for real on CPU."""
    rng = random.Random(2)
    layout = Layout(["kwok-cpu-0", "kwok-cpu-1"], ["bert-training-0-5bt94", "bert-training-1-ltzkr"], 1)
    records = ranks(rng, layout, lambda r, n: {"throughput": round(29.33 + rng.gauss(0, 0.05), 3)}, 200, (5.28, 3.8))
    pods = [pod(name, node) for name, node in zip(layout.pod_of_node, layout.nodes, strict=True)]
    events = pod_events(pods, "bert-training", 71.0)
    res = result("e2e-nvidia-training", "TestBertTraining", "PASS", 76.1,
                 config=config("kwok-cpu", 2, 1, "cpu", workload_size="tiny"), checks=training_checks("kwok-cpu"),
                 metrics=training_metrics(records, "throughput", "samples/s", []), pods=pods, events=events)
    files = {**worker_logs(records, "bert"), "events.txt": events_txt(events),
             "manifests/torchrun-job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: bert-training\n"}
    return [fixture(res, files)]


def upstream_throughputs() -> list[float]:
    """The 32 per-rank throughputs of upstream's real p3.16xlarge run, by rank."""
    found = dict(re.findall(r"Process (\d+) - Throughput: ([\d.]+)", UPSTREAM_32_RANKS.read_text()))
    return [float(found[str(rank)]) for rank in range(32)]


def straggler_run(nodes: int, per_node: int, slow_node: int, node_type: str, base: list[float],
                  probe: float, steps: int, seed: int) -> list[FixtureTest]:
    """A BERT run whose node `slow_node` runs at ~41% of the others: the straggler check fails."""
    rng = random.Random(seed)
    names = [f"ip-10-0-{1 + i // 250}-{5 + i % 250}" for i in range(nodes)]
    layout = Layout(names, [f"bert-training-worker-{i}" for i in range(nodes)], per_node)

    def values(rank: int, node: str) -> dict[str, float]:
        factor = 0.41 if node == names[slow_node] else 1.0
        return {"throughput": round(base[rank % len(base)] * factor * (1 + rng.gauss(0, 0.004)), 3),
                "probe_matmul_tflops": round(probe * (0.44 if factor < 1 else 1.0) * (1 + rng.gauss(0, 0.01)), 3)}

    records = ranks(rng, layout, values, steps, (11.2, 7.4))
    slow = [r["rank"] for r in records if r["node"] == names[slow_node]]
    metrics = training_metrics(records, "throughput", "samples/s", slow, probe="probe_matmul_tflops")
    ref = metrics["references"]["throughput"]
    worst = min(records, key=lambda r: r["values"]["throughput"])
    which = f"rank {slow[0]}" if len(slow) == 1 else f"ranks {slow[0]}-{slow[-1]}"
    message = (f"straggler: node {names[slow_node]} (pod {worst['pod']}, {which}) throughput "
               f"{worst['values']['throughput']:.2f} samples/s is below 70% of the reference {ref['reference']:.2f}")
    checks = training_checks(node_type, straggler=message)
    checks[-1].update({"measured": worst["values"]["throughput"], "expected": ref["threshold"], "unit": "samples/s"})
    pods = [pod(name, node) for name, node in zip(layout.pod_of_node, names, strict=True)]
    pods.insert(0, pod("bert-training-launcher-7xk2q", names[0], logs=["logs/bert-training-launcher-7xk2q.log"]))
    events = pod_events(pods, "bert-training-launcher", 412.0)
    res = result("e2e-nvidia-training", "TestBertTraining", "FAIL", 431.7, message=message,
                 detail=message + "\nslow ranks: " + ", ".join(map(str, slow)),
                 config=config(node_type, nodes, per_node, "nvidia"), checks=checks, metrics=metrics, pods=pods,
                 events=events)
    files = {**worker_logs(records, "bert"), "events.txt": events_txt(events),
             "logs/bert-training-launcher-7xk2q.log": UPSTREAM_32_RANKS.read_text()}
    return [fixture(res, files)]


def straggler_32ranks() -> list[FixtureTest]:
    return straggler_run(4, 8, 1, "p3.16xlarge", upstream_throughputs(), 14.1, steps=50, seed=32)


def large_256ranks(nodes: int = 32, per_node: int = 8) -> list[FixtureTest]:
    """256 ranks (A100 BERT-large figures: ~574 samples/s per GPU), 200 steps of loss each, one node slow."""
    base = [574.0] * 8
    return straggler_run(nodes, per_node, nodes // 2 + 1, "p4d.24xlarge", base, 251.0, steps=200, seed=256)


# ---- failures, sweeps, skips, errors ----

def failed_pod() -> list[FixtureTest]:
    """A worker OOMKilled after two restarts: the test fails fast naming pod, node and exit code."""
    bad, good = "bert-training-1-x7k2p", "bert-training-0-q9d4m"
    message = f"pod {bad} OOMKilled on node kwok-cpu-1 (container worker, exit code 137)"
    last_lines = "\n".join(f"step {i} loss {5.2 - i * 0.01:.3f}" for i in range(20))
    pods = [pod(good, "kwok-cpu-0", phase="Running", exit_code=None, reason=""),
            pod(bad, "kwok-cpu-1", phase="Failed", exit_code=137, reason="OOMKilled", restarts=2,
                logs=[f"logs/{bad}.log", f"logs/{bad}.previous.log"])]
    events = pod_events(pods, "bert-training", 60.0)[:-1] + [
        {"time": iso(START + timedelta(seconds=s)), "type": "Warning", "object": f"Pod/{bad}", "reason": "BackOff",
         "message": "Back-off restarting failed container worker"} for s in (14.0, 31.0)] + [
        {"time": iso(START + timedelta(seconds=48.5)), "type": "Warning", "object": "Job/bert-training",
         "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]
    checks = [{"name": "job_succeeded", "status": "fail", "message": message},
              {"name": "ranks", "status": "fail", "message": "no metrics: the job failed before any rank reported"}]
    res = result("e2e-nvidia-training", "TestBertTraining", "FAIL", 49.2, message=message,
                 detail=f"{message}\nlast 20 lines of {bad}:\n{last_lines}",
                 config=config("kwok-cpu", 2, 1, "cpu"), checks=checks, pods=pods,
                 events=sorted(events, key=lambda e: e["time"]))
    files = {f"logs/{good}.log": "step 0 loss 5.21\n", f"logs/{bad}.log": last_lines + "\nKilled\n",
             f"logs/{bad}.previous.log": last_lines + "\n", "events.txt": events_txt(events),
             "objects.yaml": f"kind: Pod\nmetadata:\n  name: {bad}\n"}
    return [fixture(res, files)]


def nccl_sweep() -> list[FixtureTest]:
    """all_reduce_perf from 8 B to 16 GiB on one p5.48xlarge (8 H100), judged against the 460 GB/s floor."""
    rng = random.Random(8)
    rows = []
    for exponent in range(3, 35):
        size = 2 ** exponent
        peak = 482.0 * size / (size + 2 ** 24)
        rows.append({"size": size, "out_of_place_gbps": round(peak * (1 + rng.gauss(0, 0.01)), 2),
                     "in_place_gbps": round(peak * (1 + rng.gauss(0, 0.01)) * 0.995, 2)})
    judged = [2 ** 33, 2 ** 34]
    average = round(sum(r["out_of_place_gbps"] for r in rows if r["size"] in judged) / len(judged), 2)
    busbw = {"rows": rows, "floor_gbps": 460, "floor_source": "H100 8-GPU all-reduce (Azure HPC health checks)",
             "judged_sizes": judged, "average_gbps": average}
    checks = [{"name": "nccl_wrong", "status": "pass", "message": "# Out of bounds values : 0 OK"},
              {"name": "busbw_floor", "status": "pass", "message": f"average busbw {average} GB/s at 8-16 GiB",
               "measured": average, "expected": 460 * 0.9, "unit": "GB/s"}]
    pods = [pod("nccl-tests-launcher-m2x8c", "ip-10-0-2-17", logs=["logs/nccl-tests-launcher-m2x8c.log"]),
            pod("nccl-tests-worker-0", "ip-10-0-2-17")]
    events = pod_events(pods, "nccl-tests-launcher", 95.0)
    metrics = {"workload": "nccl-tests", "world_size": 8, "throughput": None, "ranks": [], "aggregate": {},
               "references": {}, "slow_ranks": [], "busbw": busbw}
    res = result("e2e-nvidia", "TestNCCLTests/single-node", "PASS", 102.4,
                 config=config("p5.48xlarge", 1, 8, "nvidia"), checks=checks, metrics=metrics, pods=pods,
                 events=events)
    table = "\n".join(f"{r['size']:>12} {r['size'] // 4:>12} float sum -1 0.0 0.0 {r['out_of_place_gbps']} 0"
                      for r in rows)
    files = {"logs/nccl-tests-launcher-m2x8c.log": table + f"\n# Avg bus bandwidth    : {average}\n",
             "logs/nccl-tests-worker-0.log": "", "events.txt": events_txt(events)}
    return [fixture(res, files)]


def skipped() -> list[FixtureTest]:
    res = result("e2e-nvidia", "TestGPUCapacity", "SKIP", 0.02, execution="none",
                 message="ACCELERATOR=cpu: no GPU capacity to check", config=config("kwok-cpu", 2, 1, "cpu"))
    return [fixture(res, {})]


def error() -> list[FixtureTest]:
    """A harness error (RBAC forbids reading logs), and a test the harness wrote no result.json for."""
    pod_name = "nanogpt-training-0-abcde"
    message = (f'read log of pod {pod_name}: HTTP 403: pods "{pod_name}" is forbidden: User '
               '"system:serviceaccount:kt2t:runner" cannot get resource "pods/log"')
    res = result("e2e-nvidia-training", "TestNanoGPTTraining", "ERROR", 21.5, message=message, detail=message,
                 config=config("kwok-cpu", 2, 1, "cpu"), pods=[pod(pod_name, "kwok-cpu-0", logs=[])])
    junit_only = FixtureTest("e2e-nvidia-training", "TestMNISTTraining", "FAIL", 33.0,
                             message="TIMEOUT: waited 30s for job mnist-training to succeed",
                             detail="TIMEOUT: waited 30s for job mnist-training to succeed; last state: Running",
                             files={"logs/mnist-training-0-zz9kq.log": "epoch 0\n"},
                             properties={"metrics.ranks": "0"})
    return [fixture(res, {}), junit_only]


def hostile() -> list[FixtureTest]:
    """Names, messages and log names holding markup, control bytes, a lone surrogate and escapes."""
    evil_pod = f"evil{HOSTILE}-0"
    log_name = "logs/evil<x>&\"' name.log"
    message = f"pod {evil_pod} failed: \x1b[31mred\x1b[0m \x00NUL \ud800 surrogate \"quoted\" & <b>bold</b>"
    records = [{"rank": 0, "pod": evil_pod, "node": f"node{HOSTILE}",
                "values": {"throughput": 1.0, "loss_first": 2.0, "loss_last": 1.5},
                "steps": [[0, 2.0], [1, 1.5]]}]
    metrics = training_metrics(records, "throughput", f"samples/s{HOSTILE}", [0])
    pods = [pod(evil_pod, f"node{HOSTILE}", phase="Failed", exit_code=1, reason=HOSTILE,
                logs=[log_name, "../../../../etc/passwd", "/etc/hostname", "javascript:alert(1)"])]
    events = [{"time": iso(START), "type": "Warning", "object": f"Pod/{evil_pod}", "reason": HOSTILE,
               "message": message}]
    res = result("e2e-nvidia-training", f"TestHostile{HOSTILE}", "FAIL", 1.0, message=message,
                 detail=message + "\n" + HOSTILE * 3, checks=[{"name": HOSTILE, "status": "fail", "message": message}],
                 config={HOSTILE: {"value": HOSTILE, "source": HOSTILE, "origin": HOSTILE}}, metrics=metrics,
                 pods=pods, events=events)
    return [fixture(res, {log_name: f"{HOSTILE}\n"})]


SCENARIOS: dict[str, Callable[[], list[FixtureTest]]] = {
    "passing-cpu-2ranks": passing_cpu_2ranks,
    "straggler-32ranks": straggler_32ranks,
    "failed-pod": failed_pod,
    "nccl-sweep": nccl_sweep,
    "skipped": skipped,
    "error": error,
    "large-256ranks": large_256ranks,
    "large-256nodes": lambda: large_256ranks(nodes=256, per_node=1),
    "hostile": hostile,
}
# Two binaries' runs in one artifacts folder, every outcome (the report lists binaries by name).
SCENARIOS["full-run"] = lambda: [*passing_cpu_2ranks(), *error(), *nccl_sweep(), *skipped()]


def _test_folder(artifacts: Path, test: FixtureTest) -> Path:
    safe = "/".join(re.sub(r"[^A-Za-z0-9_.:-]", "_", part) for part in test.name.split("/"))
    return artifacts / test.binary / safe


def write_artifacts(artifacts: Path, tests: list[FixtureTest]) -> Path:
    """Writes an artifacts folder as a run would leave it: JUnit per binary, result.json and files per test."""
    artifacts.mkdir(parents=True, exist_ok=True)
    by_binary: dict[str, list[CaseResult]] = {}
    for test in tests:
        folder = _test_folder(artifacts, test)
        for relative, text in test.files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if test.result is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "result.json").write_text(json.dumps(test.result, indent=1))
        # harness.report.junit.xml_safe cannot encode a lone surrogate (it raises): only result.json carries one.
        message, detail = (text.encode("utf-8", "replace").decode() for text in (test.message, test.detail))
        by_binary.setdefault(test.binary, []).append(CaseResult(
            test.name, Outcome(test.outcome), test.elapsed_s, message, detail, properties=test.properties))
    for binary, cases in by_binary.items():
        write_junit(artifacts / f"junit_{binary}.xml", binary, cases, {"config.run_id": "06e83817-fixture"})
    (artifacts / "metadata.json").write_text(json.dumps({"tester-version": "fixture"}) + "\n")
    return artifacts


def write_scenario(folder: Path, name: str) -> list[FixtureTest]:
    """Writes the scenario's artifacts folder; returns its tests (what the page should show)."""
    tests = SCENARIOS[name]()
    write_artifacts(folder, tests)
    return tests


@dataclass(frozen=True)
class ScenarioPage:
    """A scenario's artifacts folder, its report.html and the tests the page should show."""

    name: str
    artifacts: Path
    report: Path
    tests: list[FixtureTest]

    @property
    def url(self) -> str:
        return self.report.as_uri()


def write_pages(root: Path, names: list[str] | None = None) -> dict[str, ScenarioPage]:
    """Every scenario (or those named) under root/<name>, each with its report.html."""
    from harness.report.page import write_report

    pages = {}
    for name in names or list(SCENARIOS):
        tests = write_scenario(root / name, name)
        pages[name] = ScenarioPage(name, root / name, write_report(root / name), tests)
    return pages


def main(argv: list[str]) -> int:

    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1].strip() + "\nscenarios: " + " ".join(SCENARIOS))
        return 0 if argv else 2
    for page in write_pages(Path(argv[0]), argv[1:] or None).values():
        print(page.report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
