"""False fails and missed stragglers of the straggler verdict, counted over repeated real runs.

Two parts, each run N times (--runs, at least 10 for a figure worth quoting), with the host under a
background load that comes and goes (--load processes, each busy then idle for random 0.2-2 s
spells; its effect on one thread is measured first with bench/host_cpu_noise.py's loop, so the
figures say how noisy the CPU was):
- **healthy**: the four trainings (`e2e-nvidia-training`: BERT, nanoGPT, MNIST, elastic recovery)
  on the local cluster's 2 real nodes (kubelet + containerd, the workloads image), with the
  product's STRAGGLER_FRACTION. A run whose straggler check fails is a false fail: no node is
  slow. Other failures are counted apart, with their messages.
- **slowed**: TestNanoGPTTraining on the 2 host-process nodes with `hack/local-cluster node-slow
  kwok-cpu-1 FRACTION` (its pods stopped FRACTION of every 100 ms): the slowed node must be named,
  alone, every time.

One line per figure, `name: value unit  # how`; progress on stderr. The cluster is the one the
environment names (KT2T_STATE, KT2T_PORT_OFFSET), else one of the bench's own
(/tmp/kt2t-bench/false-fails, offset 600), brought down at the end if started here.

    .venv/bin/python bench/false_fails.py [--runs 10] [--load 1] [--part healthy,slowed]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench_common import REPO, BenchCluster, emit, progress
from host_cpu_noise import loop_rates

CLUSTER = BenchCluster.from_env(Path("/tmp/kt2t-bench/false-fails"), 600)
WORK = Path(os.environ.get("KT2T_BENCH_WORK", "/tmp/kt2t-bench/false-fails-runs"))
BINARY = str(Path(sys.executable).parent / "e2e-nvidia-training")
HACK_IMAGES = REPO / "hack" / "images"
REAL_NODE_TYPE, HOST_NODE_TYPE = "container-cpu", "kwok-cpu"
SLOWED, NORMAL = "kwok-cpu-1", "kwok-cpu-0"
SUITE_ENV = {"ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "JOB_TIMEOUT": "10m", "IMAGE_PULL_POLICY": "IfNotPresent"}


def busy_spells(seed: int) -> None:
    """The background load's process: busy, then idle, for random spells of 0.2-2 s, forever."""
    rng = random.Random(seed)
    while True:
        end = time.monotonic() + rng.uniform(0.2, 2.0)
        while time.monotonic() < end:
            sum(i * i for i in range(10_000))
        time.sleep(rng.uniform(0.2, 2.0))


@contextmanager
def background_load(processes: int) -> Iterator[None]:
    """`processes` busy-spell processes for the block's duration (stopped by their pids after)."""
    started = [subprocess.Popen([sys.executable, __file__, "--load-worker", str(seed)]) for seed in range(processes)]
    try:
        yield
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            proc.wait(timeout=10)


def noise_under_load(seconds: float) -> None:
    """bench/host_cpu_noise.py's one-thread loop under the load: how unsteady the CPU is meanwhile."""
    rates = loop_rates(seconds)
    for window_s in (0.5, 2.0):
        size = round(window_s / 0.1)
        windows = [statistics.mean(rates[i:i + size]) for i in range(0, len(rates) - size + 1, size)]
        emit(f"load_slowest_over_fastest_{window_s:g}s", min(windows) / max(windows), "ratio",
             f"{len(windows)} windows of {window_s:g} s, one thread, under the background load")


@dataclass
class Outcome:
    """One run: each test's result, and the straggler checks' lines."""

    exit_code: int
    failed: dict[str, str] = field(default_factory=dict)  # test -> failure message
    checks: dict[str, dict[str, str]] = field(default_factory=dict)  # test -> check.straggler.* -> value
    tests: list[str] = field(default_factory=list)

    @property
    def straggler_failures(self) -> dict[str, list[str]]:
        return {test: [name for name, value in checks.items() if value.startswith("fail: ")]
                for test, checks in self.checks.items()
                if any(value.startswith("fail: ") for value in checks.values())}


def run_suite(kubeconfig: str, artifacts: Path, node_type: str, tests: str, env: dict[str, str]) -> Outcome:
    done = subprocess.run([BINARY, "--test.v", f"--nodeType={node_type}", f"--test.run=^({tests})$"],
                          env={**os.environ, **SUITE_ENV, **env, "KUBECONFIG": kubeconfig, "ARTIFACTS": str(artifacts)},
                          capture_output=True, text=True, timeout=1800, check=False)
    (artifacts / "stdout.txt").write_text(done.stdout + done.stderr)
    outcome = Outcome(done.returncode)
    junit = artifacts / "junit_e2e-nvidia-training.xml"
    if not junit.exists():
        outcome.failed["(no JUnit)"] = (done.stdout + done.stderr)[-500:]
        return outcome
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "?")
        outcome.tests.append(name)
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failure is not None:
            outcome.failed[name] = failure.get("message", "")
        outcome.checks[name] = {p.get("name", ""): p.get("value", "") for p in case.iter("property")
                                if p.get("name", "").startswith("check.straggler.")}
    return outcome


def workloads_image_on_real_nodes() -> str:
    """hack/images build (cached by its inputs), imported into the real nodes; the image's name."""
    built = subprocess.run([str(HACK_IMAGES), "build", "workloads"], capture_output=True, text=True, check=True)
    CLUSTER.run("load-image", built.stdout.strip().splitlines()[-1], timeout=3600)
    return subprocess.run([str(HACK_IMAGES), "name", "workloads"], capture_output=True, text=True,
                          check=True).stdout.strip()


def unnamed_doubts(outcome: Outcome) -> int:
    """Straggler checks that passed with a rank beyond the threshold, not named (the evidence rule)."""
    return sum("no node named" in value for checks in outcome.checks.values() for value in checks.values())


def healthy(kubeconfig: str, runs: int) -> None:
    image = workloads_image_on_real_nodes()
    false_fails, other_fails, doubts = 0, 0, 0
    for run in range(runs):
        started = time.monotonic()
        outcome = run_suite(kubeconfig, WORK / f"healthy-{run}", REAL_NODE_TYPE,
                            "TestBertTraining|TestNanoGPTTraining|TestMNISTTraining|TestElasticRecovery",
                            {"TRAINING_IMAGE": image})
        stragglers = outcome.straggler_failures
        false_fails += bool(stragglers)
        other = {t: m for t, m in outcome.failed.items() if t not in stragglers}
        other_fails += bool(other)
        doubts += unnamed_doubts(outcome)
        progress(f"healthy run {run + 1}/{runs}: exit {outcome.exit_code} in {time.monotonic() - started:.0f} s; "
                 f"tests {len(outcome.tests)}; straggler fails {stragglers or 'none'}; other fails {other or 'none'}")
    emit("healthy_false_fails", f"{false_fails} of {runs}", "runs",
         "a straggler check failed on 2 healthy real nodes (4 trainings a run, STRAGGLER_FRACTION 0.7)")
    emit("healthy_other_failures", f"{other_fails} of {runs}", "runs", "a test failed on something else")
    emit("healthy_unnamed_suspects", doubts, "checks",
         "straggler checks that passed with a rank beyond the threshold but not beyond its spread or unagreed")


def slowed(kubeconfig: str, runs: int, fraction: float) -> None:
    named_alone, other_named, missed = 0, 0, 0
    CLUSTER.run("node-slow", SLOWED, str(fraction))
    try:
        for run in range(runs):
            started = time.monotonic()
            outcome = run_suite(kubeconfig, WORK / f"slowed-{run}", HOST_NODE_TYPE, "TestNanoGPTTraining",
                                {"IMAGE_PULL_POLICY": "IfNotPresent"})
            message = outcome.failed.get("TestNanoGPTTraining", "")
            failed_checks = outcome.straggler_failures.get("TestNanoGPTTraining", [])
            lines = [outcome.checks["TestNanoGPTTraining"][c] for c in failed_checks]
            names_slowed = any(f"node {SLOWED} (" in line for line in lines)
            names_normal = any(f"node {NORMAL} (" in line for line in lines)
            named_alone += names_slowed and not names_normal
            other_named += names_normal
            missed += not names_slowed
            progress(f"slowed run {run + 1}/{runs}: exit {outcome.exit_code} in {time.monotonic() - started:.0f} s; "
                     f"failed checks {failed_checks}; message {message[:300]!r}")
    finally:
        CLUSTER.run("node-slow", SLOWED, "off")
    emit("slowed_named_alone", f"{named_alone} of {runs}", "runs",
         f"{SLOWED} slowed to {1 - fraction:g} of its time (node-slow {fraction:g}) named, and {NORMAL} not")
    emit("slowed_other_node_named", f"{other_named} of {runs}", "runs", f"{NORMAL} named too")
    emit("slowed_missed", f"{missed} of {runs}", "runs", f"{SLOWED} not named")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--load-worker":
        busy_spells(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=1, help="background busy-spell processes (0: none)")
    parser.add_argument("--part", default="healthy,slowed", help="healthy, slowed or both (comma-separated)")
    parser.add_argument("--slow-fraction", type=float, default=0.5)
    parser.add_argument("--keep-cluster", action="store_true")
    args = parser.parse_args()
    # A SIGTERM ends the bench as Ctrl-C does, so the load's processes stop and the cluster comes down.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    parts = set(args.part.split(","))
    if not parts <= {"healthy", "slowed"} or args.runs < 1:
        parser.error(f"--part {args.part!r}: expected healthy, slowed or both; --runs {args.runs}: at least 1")
    WORK.mkdir(parents=True, exist_ok=True)
    with CLUSTER.up("--real-nodes", "2", keep=args.keep_cluster) as kubeconfig, background_load(args.load):
        noise_under_load(20.0)
        if "healthy" in parts:
            healthy(kubeconfig, args.runs)
        if "slowed" in parts:
            slowed(kubeconfig, args.runs, args.slow_fraction)
    emit("artifacts", str(WORK))


if __name__ == "__main__":
    main()
