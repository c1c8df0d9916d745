"""The runner's Go-compatible behaviours, in-process on tests that need no cluster: test2json framing
(compared with a real Go test binary's), -test.count, -test.shuffle, -test.timeout's panic,
-test.paniconexit0, no-match, --dry-run, --fail-fast, --disable-graceful-teardown, klog's -v,
and a signal relayed by kubetest2's exec tester counted once."""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import junitparser
import pytest

from harness.config.settings import Origin, Source
from harness.config.topology import NodeInfo, Topology
from harness.errors import Interrupted, TestFailure
from harness.framework.context import TEST2JSON_MARKER, TestContext
from harness.framework.suite import Feature, Suite
from harness.jobs import gpu_sharing
from harness.jobs.workload import Workload
from harness.runner import EXIT_FAIL, EXIT_PANIC, EXIT_PASS, EXIT_USAGE, Runner, main
from testbins import e2e_nvidia
from testbins.nvidia import capabilities, capacity, containerd, dcgm, mpi, nccl, node_pairs, unit

GO_FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "go-test2json"


pytestmark = pytest.mark.usefixtures("keep_signal_handlers")


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    artifacts = tmp_path / "artifacts"
    monkeypatch.setenv("ARTIFACTS", str(artifacts))
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # nothing here contacts a cluster
    for name in ("ALLOW_NO_TESTS", "KEEP_RESOURCES"):
        monkeypatch.delenv(name, raising=False)
    return artifacts


def cases(artifacts: Path, binary: str = "unit-suite") -> list[junitparser.TestCase]:
    xml = junitparser.JUnitXml.fromfile(str(artifacts / f"junit_{binary}.xml"))
    return [case for suite in xml for case in suite]


# -- test2json: the same shape of tests as tests/fixtures/go-test2json/tiny_test.go --------------

def tiny_suite() -> Suite:
    suite = Suite("unit-suite", "Go's tiny test, in Python")

    def multi(t: TestContext) -> None:
        t.run("MPIJob succeeds", lambda sub: sub.logf("deep"))

    suite.features("TestA", [Feature("single-node", lambda t: t.logf("sub log")),
                             Feature("multi-node:all_reduce_perf", multi)], needs_cluster=False)

    @suite.test("TestB", needs_cluster=False)
    def test_b(t: TestContext) -> None:
        def bad(_sub: TestContext) -> None:
            raise TestFailure("it failed\nsecond line")

        t.run("bad", bad)

    @suite.test("TestC", needs_cluster=False)
    def test_c(t: TestContext) -> None:
        t.skip("not here")

    return suite


def framing(text: str) -> list[str]:
    """The lines test2json reads as framing, with their times zeroed."""
    return [re.sub(r"\(\d+\.\d+s\)", "(0.00s)", line) for line in text.splitlines()
            if line.startswith(TEST2JSON_MARKER)]


def test_test2json_framing_is_go_s(env, capsys):
    assert main(tiny_suite(), ["-test.v=test2json"]) == EXIT_FAIL
    ours = capsys.readouterr().out
    assert framing(ours) == framing((GO_FIXTURES / "tiny.raw").read_text())


def events(raw: str) -> list[tuple[str, str | None]]:
    """`go tool test2json -t`'s events for raw test output: (Action, Test) but for output."""
    done = subprocess.run(["go", "tool", "test2json", "-t"], input=raw, capture_output=True, text=True, check=True,
                          timeout=120)
    parsed = [json.loads(line) for line in done.stdout.splitlines()]
    return [(e["Action"], e.get("Test")) for e in parsed if e["Action"] != "output"]


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed (hack/setup.sh installs it)")
def test_go_tool_test2json_reads_ours_as_it_reads_go_s(env, capsys):
    main(tiny_suite(), ["-test.v=test2json"])
    ours = events(capsys.readouterr().out)
    assert ours == events((GO_FIXTURES / "tiny.raw").read_text())
    assert ("fail", "TestB/bad") in ours and ("skip", "TestC") in ours and ours[-1] == ("fail", None)


# -- count, shuffle, parallel ---------------------------------------------------------------------

def counting_suite(runs: list[str]) -> Suite:
    suite = Suite("unit-suite", "counts")
    for name in ("TestOne", "TestTwo", "TestThree"):
        suite.test(name, needs_cluster=False)(lambda t: runs.append(f"{t.name} {t.artifacts_dir.name}"))
    return suite


def test_count_repeats_every_test_with_its_own_artifacts(env):
    runs: list[str] = []
    assert main(counting_suite(runs), ["-test.count=2", "-test.run=One|Two"]) == EXIT_PASS
    # harness.config.artifacts.folder_of_test: a repetition's folder is TestX_01 (`#` is not safe in a path)
    assert runs == ["TestOne TestOne", "TestTwo TestTwo", "TestOne TestOne_01", "TestTwo TestTwo_01"]
    assert [c.name for c in cases(env)] == ["TestOne", "TestTwo", "TestOne", "TestTwo"]


def test_shuffle_with_a_seed_is_printed_and_repeatable(env, capsys):
    orders = []
    for _ in range(2):
        runs: list[str] = []
        assert main(counting_suite(runs), ["-test.shuffle=12"]) == EXIT_PASS
        orders.append(runs)
        assert capsys.readouterr().out.splitlines()[0] == "-test.shuffle 12"
    assert orders[0] == orders[1] and sorted(orders[0]) == sorted(f"{n} {n}" for n in ("TestOne", "TestTwo",
                                                                                        "TestThree"))
    seen = set()
    for seed in range(20):  # some seed changes the declaration order
        runs = []
        main(counting_suite(runs), [f"-test.shuffle={seed}"])
        seen.add(tuple(runs))
    assert len(seen) > 1
    main(counting_suite([]), ["-test.shuffle=on"])
    assert capsys.readouterr().out.splitlines()[0].split()[1].isdigit()


def test_parallel_is_accepted_and_changes_nothing(env, capsys):
    runs: list[str] = []
    assert main(counting_suite(runs), ["-test.parallel=4"]) == EXIT_PASS
    assert len(runs) == 3 and "warning" not in capsys.readouterr().err


# -- no match -------------------------------------------------------------------------------------

def test_a_selection_that_matches_nothing_fails_naming_pattern_and_tests(env, capsys):
    assert main(counting_suite([]), ["-test.run=^TestMissing$"]) == EXIT_FAIL
    out, err = capsys.readouterr()
    assert out.splitlines() == ["testing: warning: no tests to run", "FAIL"]
    assert "no test or feature matches -test.run='^TestMissing$'" in err and "TestThree" in err
    (case,) = cases(env)
    assert case.name == "Selection" and isinstance(case.result[0], junitparser.Failure)


@pytest.mark.parametrize("opt_out", [["--allowNoTests"], []])
def test_an_empty_selection_passes_when_asked_as_go_does(env, capsys, monkeypatch, opt_out):
    if not opt_out:
        monkeypatch.setenv("ALLOW_NO_TESTS", "true")
    assert main(counting_suite([]), ["-test.run=^TestMissing$", *opt_out]) == EXIT_PASS
    assert capsys.readouterr().out.splitlines() == ["testing: warning: no tests to run", "PASS"]
    assert cases(env) == []


# -- timeout and exit(0) --------------------------------------------------------------------------

def test_timeout_captures_cleans_up_writes_junit_then_panics_like_go(env, capsys):
    suite = Suite("unit-suite", "waits")
    cleaned = []

    @suite.test("TestWaits", needs_cluster=False)
    def waits(t: TestContext) -> None:
        t.cleanup(lambda: cleaned.append(t.name), "note")
        if t.cancel.wait(30):
            raise Interrupted(f"{t.cancel.reason} while waiting")

    suite.test("TestNext", needs_cluster=False)(lambda t: None)
    started = time.monotonic()
    assert main(suite, ["-test.timeout=500ms", "-test.v"]) == EXIT_PANIC
    assert time.monotonic() - started < 10
    out, err = capsys.readouterr()
    assert cleaned == ["TestWaits"]
    # Go's header and the running tests with their times in whole seconds, printed last.
    assert re.search(r"panic: test timed out after 500ms\n\trunning tests:\n\t\tTestWaits \(\d+s\)\n*$", err), err
    assert "--- FAIL: TestWaits" in out and "PASS" not in out.splitlines()[-1]
    waited, nxt = cases(env)
    assert "TIMEOUT: -test.timeout 500ms expired" in waited.result[0].message
    assert isinstance(nxt.result[0], junitparser.Skipped)


def exits(t: TestContext) -> None:
    t.logf("exiting")
    sys.exit(0)


def test_exit_0_under_paniconexit0_fails_and_panics(env, capsys):
    suite = Suite("unit-suite", "exits")
    suite.test("TestExit0", needs_cluster=False)(exits)
    assert main(suite, ["-test.paniconexit0", "-test.v"]) == EXIT_PANIC
    out, err = capsys.readouterr()
    assert "--- FAIL: TestExit0" in out and "panic: unexpected call to os.Exit(0) during test" in err
    assert cases(env)[0].result[0].message == "panic: unexpected call to os.Exit(0) during test"


def test_exit_0_without_paniconexit0_ends_the_run_as_in_go(env):
    suite = Suite("unit-suite", "exits")
    after: list[str] = []
    suite.test("TestExit0", needs_cluster=False)(exits)
    suite.test("TestAfter", needs_cluster=False)(lambda t: after.append(t.name))
    with pytest.raises(SystemExit) as ended:
        main(suite, [])
    assert ended.value.code == 0 and after == []
    assert [c.name for c in cases(env)] == ["TestExit0"]  # JUnit still written


# -- e2e-framework: dry run, fail-fast, graceful teardown ----------------------------------------

def test_dry_run_lists_and_contacts_no_cluster(env, capsys):
    suite = Suite("unit-suite", "needs a cluster")
    suite.features("TestMPI", [Feature("single-node", lambda t: pytest.fail("ran"), {"suite": ("nvidia",)},
                                       ("MPIJob succeeds",)),
                               Feature("multi-node:x", lambda t: pytest.fail("ran"))])
    assert main(suite, ["--dry-run", "-test.run=/single"]) == EXIT_PASS
    out = capsys.readouterr().out
    assert "TestMPI/single-node  (feature single-node [suite=nvidia]; assessments: MPIJob succeeds)" in out
    assert "multi-node" not in out
    (case,) = cases(env)
    assert case.name == "TestMPI/single-node" and isinstance(case.result[0], junitparser.Skipped)


def stepped_suite(done: list[str]) -> Suite:
    """Features as upstream's steps: a setup, assessments through t.assessment, a cleanup; each records
    what ran in `done` (an assessment fails: being judged shows)."""
    suite = Suite("unit-suite", "steps")

    def feature(t: TestContext) -> None:
        done.append(f"setup {t.name}")
        t.cleanup(lambda: done.append(f"teardown {t.name}"), "record")
        for name in t.feature.assessments:
            def judged(name: str = name) -> None:
                done.append(f"judged {name}")
                raise TestFailure(f"{name}: judged")

            t.assessment(name, judged)

    suite.test("TestBertTraining", feature="bert-training", assessments=("BERT training Job succeeds",),
               needs_cluster=False)(feature)
    suite.features("TestMPI", [Feature("single-node", feature, {}, ("MPIJob succeeds", "bus bandwidth"))],
                   needs_cluster=False)
    suite.features("TestMPI2", [Feature("single-node", feature, {}, ("MPIJob succeeds",)),
                                Feature("multi-node", feature, {}, ("MPIJob succeeds",))],
                   needs_cluster=False)
    return suite


def test_assess_skips_assessments_not_features_as_e2e_framework_does(env, capsys):
    """e2e-framework's execFeature: setup and teardown run, each assessment is a subtest skipped with
    requireProcessing's message when --assess does not match it or --skip-assessment does; the
    feature passes with nothing judged. Before: the feature ran whole (every assessment judged) or
    not at all."""
    done: list[str] = []
    assert main(stepped_suite(done), ["-test.v", "--assess=^bus", "--skip-assessment=bus"]) == EXIT_PASS
    out = capsys.readouterr().out
    assert not [step for step in done if step.startswith("judged")]
    assert done.count("setup TestBertTraining") == done.count("teardown TestBertTraining") == 1
    assert "teardown TestMPI2/multi-node" in done
    assert "    === RUN   TestBertTraining/BERT_training_Job_succeeds" in out
    assert '        Skipping assessment "BERT training Job succeeds": name not matched' in out
    assert "    --- SKIP: TestBertTraining/BERT_training_Job_succeeds (" in out
    assert '        Skipping assessment: "bus bandwidth": name matched' in out
    outcomes = {case.name: type(case.result[0]).__name__ if case.result else "pass" for case in cases(env)}
    assert outcomes == {
        "TestBertTraining": "pass", "TestBertTraining/BERT_training_Job_succeeds": "Skipped",
        "TestMPI": "pass", "TestMPI/MPIJob_succeeds": "Skipped", "TestMPI/bus_bandwidth": "Skipped",
        "TestMPI2": "pass", "TestMPI2/single-node": "pass",
        "TestMPI2/single-node/MPIJob_succeeds": "Skipped", "TestMPI2/multi-node": "pass",
        "TestMPI2/multi-node/MPIJob_succeeds": "Skipped"}


def test_a_selected_assessment_is_judged_in_its_feature_and_the_others_skipped(env):
    done: list[str] = []
    assert main(stepped_suite(done), ["--assess=MPIJob", "-test.run=TestMPI$"]) == EXIT_FAIL
    assert done == ["setup TestMPI", "judged MPIJob succeeds", "teardown TestMPI"]
    outcomes = {case.name: type(case.result[0]).__name__ if case.result else "pass" for case in cases(env)}
    assert outcomes == {"TestMPI": "Failure"}  # failed in its first assessment: the second never ran
    done.clear()
    assert main(stepped_suite(done), ["--skip-assessment=MPIJob", "-test.run=TestMPI$"]) == EXIT_FAIL
    assert done == ["setup TestMPI", "judged bus bandwidth", "teardown TestMPI"]
    outcomes = {case.name: type(case.result[0]).__name__ if case.result else "pass" for case in cases(env)}
    assert outcomes == {"TestMPI": "Failure", "TestMPI/MPIJob_succeeds": "Skipped"}


def test_an_assessment_its_feature_does_not_declare_is_an_error(env):
    suite = Suite("unit-suite", "undeclared")
    suite.test("TestX", assessments=("declared",), needs_cluster=False)(
        lambda t: t.assessment("undeclared", lambda: None))
    assert main(suite, []) == EXIT_FAIL
    assert "assessment 'undeclared' is not one its feature declares" in cases(env)[0].result[0].message


class LaunchedJob:
    """What the GPU binary's features launch here: no cluster; waiting for it is judging it, and fails."""

    def __init__(self, t: TestContext, workload: Workload, launched: list[str]) -> None:
        self.test, self.name = t.name, workload.job_name
        self.namespace, self.selector = "ns", "job=x"
        launched.append(f"{t.name}: {workload.job_name}")

    def wait_succeeded(self) -> None:
        raise TestFailure(f"judged {self.name}")


def two_p5_nodes() -> Topology:
    nodes = tuple(NodeInfo(f"p5-{i}", "p5.48xlarge", 8, 32, True, cpus=192) for i in range(2))
    origins = {name: Origin(Source.DISCOVERED, "canned") for name in ("node_type", "node_count", "gpus_per_node",
                                                                     "efa_per_node")}
    return Topology("p5.48xlarge", nodes, 8, 32, origins)


@pytest.fixture
def nvidia_without_cluster(monkeypatch) -> list[str]:
    """The GPU binary's own features on two p5 nodes, with every launch recorded (and nothing applied)."""
    launched: list[str] = []
    monkeypatch.setattr(Runner, "_set_up", lambda runner: setattr(runner.session, "topology", two_p5_nodes()))
    for module in (nccl, mpi, unit, capabilities, containerd, dcgm, capacity, node_pairs):
        monkeypatch.setattr(module, "launch", lambda t, workload, *_, **__: LaunchedJob(t, workload, launched))
        if hasattr(module, "image"):
            monkeypatch.setattr(module, "image", lambda *_, **__: "example.com/image:tag")
    return launched


@pytest.mark.parametrize(("called", "status"), [("e2e-nvidia", EXIT_FAIL), ("nvidia.test", EXIT_PASS)])
def test_nvidia_test_assess_launches_every_feature_and_judges_only_what_it_names(env, capsys, nvidia_without_cluster,
                                                                                called, status):
    """`nvidia.test --assess='bus bandwidth'`: every feature still launches its Job (setup), and only
    TestNCCLAllReduce's assessment (ours: run under e2e-nvidia) is judged; every other assessment is
    a skipped subtest saying why. Before the GPU binary's features marked their assessments,
    --assess kept or dropped whole features: only TestNCCLAllReduce launched (nvidia.test: none,
    exit 1 "no test or feature matches")."""
    argv = ["-test.v", "--assess=bus bandwidth", "--dcgmDiagEnabled=true"]
    assert main(e2e_nvidia.SUITE, argv, called=called) == status
    out = capsys.readouterr().out
    launched = sorted({line.partition(": ")[0] for line in nvidia_without_cluster})
    upstream = ["TestContainerdConfig", "TestDcgmDiagnostics", "TestMPIJobPytorchTraining/multi-node:all_gather_perf",
                "TestMPIJobPytorchTraining/multi-node:all_reduce_perf",
                "TestMPIJobPytorchTraining/multi-node:alltoall_perf", "TestMPIJobPytorchTraining/single-node",
                "TestNvidiaDriverCapabilities", "TestSingleNodeUnitTest/hpc-benckmarks",
                "TestSingleNodeUnitTest/unit-test"]
    # TestGPUCapacity's one assessment is the whole test (what the nodes advertise, judged first): no setup.
    ours = ["TestNCCLAllReduce", "TestNCCLTests/multi-node", "TestNCCLTests/single-node", "TestNodePairs"]
    assert launched == sorted(upstream + (ours if called == "e2e-nvidia" else []))
    results = {case.name: case.result[0].message if case.result else "passed"
               for case in cases(env, "e2e-nvidia")}
    judged = {name: message for name, message in results.items() if message.startswith("judged")}
    assert judged == ({"TestNCCLAllReduce": "judged nccl-allreduce"} if called == "e2e-nvidia" else {})
    skipped = {name for name, message in results.items() if message.startswith("Skipping assessment")}
    assert {"TestMPIJobPytorchTraining/single-node/MPIJob_succeeds", "TestSingleNodeUnitTest/unit-test/"
            "Unit_test_Job_succeeds", "TestDcgmDiagnostics/DCGM_level-4_diagnostic_passes",
            "TestContainerdConfig/DaemonSet_becomes_ready", "TestNvidiaDriverCapabilities/Check_Pod_becomes_ready",
            "TestSingleNodeUnitTest/hpc-benckmarks/HPC_test_Job_succeeds"} <= skipped
    assert ("TestNodePairs/the_slow_node_named" in skipped) is (called == "e2e-nvidia")
    assert ("TestGPUCapacity/GPUs_seen" in skipped) is (called == "e2e-nvidia")
    assert '        Skipping assessment "Unit test Job succeeds": name not matched' in out


class SharingPlugin:
    """The sharing device plugin, without a cluster: nothing to share or restore."""

    def __init__(self, *_: object, **__: object) -> None:
        self.workload: tuple[str, str] | None = None

    def share(self) -> None:
        pass

    def restore(self) -> None:
        pass


@pytest.mark.parametrize(("assess", "status", "judged", "skipped"), [
    ("advertises", EXIT_PASS, None, ["oversubscribed_pods_share_a_physical_GPU_concurrently",
                                     "GPU_is_in_EXCLUSIVE_PROCESS_compute_mode"]),
    ("advertises|EXCLUSIVE", EXIT_FAIL, "judged gpu-sharing-mps",
     ["oversubscribed_pods_share_a_physical_GPU_concurrently"]),
])
def test_mps_judges_each_of_its_assessments_apart(env, capsys, nvidia_without_cluster, monkeypatch, assess, status,
                                                  judged, skipped):
    """TestMps' one flow (harness/jobs/gpu_sharing.py) split into its three declared assessments: what
    the nodes advertise is judged alone, the pods are waited for only by an assessment that judges
    them. Before, --assess=advertises ran the whole flow (the pods judged: exit 1)."""
    monkeypatch.setattr(gpu_sharing, "GpuSharing", SharingPlugin)
    monkeypatch.setattr(gpu_sharing, "image", lambda *_, **__: "example.com/image:tag")
    monkeypatch.setattr(gpu_sharing, "launch",
                        lambda t, workload, *_: LaunchedJob(t, workload, nvidia_without_cluster))
    # the nodes advertise their 8 GPUs x 4 replicas (GPU_SHARING_REPLICAS' default) at once
    monkeypatch.setattr(gpu_sharing, "wait_for", lambda *_, **__: None)
    monkeypatch.setattr(gpu_sharing, "advertised", lambda _items: {"p5-0": 32, "p5-1": 32})
    monkeypatch.setattr(Runner, "_set_up", lambda runner: runner.session.__dict__.update(
        topology=two_p5_nodes(), cluster=SimpleNamespace(list=lambda *_: {"items": []}, request_count=0)))
    argv = ["-test.v", "-test.run=^TestMps$", "--mpsEnabled=true", f"--assess={assess}"]
    assert main(e2e_nvidia.SUITE, argv) == status
    assert nvidia_without_cluster == ["TestMps: gpu-sharing-mps"]  # setup: the pods launched either way
    results = {case.name: case for case in cases(env, "e2e-nvidia")}
    mps = results.pop("TestMps")
    assert (mps.result[0].message if mps.result else None) == judged
    # judged, and recorded with the others at the end: a pods' assessment that fails first leaves it unrecorded
    # (as before the split, when the pods' wait failed)
    assert ("verdict: 1 checks ran; passed: gpu_sharing.advertised" in capsys.readouterr().out) is (judged is None)
    assert {name.removeprefix("TestMps/") for name in results} == set(skipped)


def keeps_recorder(kept: dict[str, bool], fail: bool):
    def feature(t: TestContext) -> None:
        t.cleanup(lambda: kept.__setitem__(t.name, t.keeps_resources()), "record")
        if fail:
            raise TestFailure("broken")

    return feature


def test_fail_fast_stops_the_tests_features_and_keeps_the_failed_ones_resources(env):
    kept: dict[str, bool] = {}
    suite = Suite("unit-suite", "features")
    suite.features("TestX", [Feature("ok", keeps_recorder(kept, False)), Feature("bad", keeps_recorder(kept, True)),
                             Feature("later", keeps_recorder(kept, False))], needs_cluster=False)
    suite.test("TestY", needs_cluster=False)(keeps_recorder(kept, False))
    assert main(suite, ["--fail-fast"]) == EXIT_FAIL
    assert kept == {"TestX/ok": False, "TestX/bad": True, "TestY": False}  # TestX/later never ran
    kept.clear()
    assert main(suite, []) == EXIT_FAIL
    assert kept == {"TestX/ok": False, "TestX/bad": False, "TestX/later": False, "TestY": False}


def test_disable_graceful_teardown_keeps_every_tests_resources(env):
    kept: dict[str, bool] = {}
    suite = Suite("unit-suite", "keeps")
    suite.test("TestX", needs_cluster=False)(keeps_recorder(kept, False))
    assert main(suite, ["--disable-graceful-teardown"]) == EXIT_PASS
    assert kept == {"TestX": True}


def test_fail_fast_and_parallel_are_exclusive_as_in_e2e_framework(env, capsys):
    assert main(counting_suite([]), ["--fail-fast", "--parallel"]) == EXIT_USAGE
    assert "--fail-fast and --parallel are mutually exclusive" in capsys.readouterr().err


# -- warnings, klog -v, metric dimensions ---------------------------------------------------------

def test_flags_without_effect_warn_and_metric_dimensions_are_recorded(env, capsys):
    assert main(counting_suite([]), ["-test.cpuprofile=cpu.out", "--parallel", "--metricDimensions=cluster=a,az=b",
                                     "-vmodule=x=2"]) == EXIT_PASS
    err = capsys.readouterr().err
    assert "warning: -test.cpuprofile has no effect here (it would write a Go CPU profile)" in err
    assert "warning: --parallel has no effect here" in err and "warning: -vmodule has no effect" in err
    assert "CloudWatch" in err
    suite = junitparser.JUnitXml.fromfile(str(env / "junit_unit-suite.xml"))
    props = {p.name: p.value for s in suite for p in s.properties()}
    assert props["config.metric_dimensions"] == "cluster=a,az=b"


@pytest.mark.parametrize(("level", "expected"), [("0", logging.WARNING), ("2", logging.INFO), ("5", logging.DEBUG)])
def test_klog_v_sets_the_log_level(env, level, expected):
    root = logging.getLogger()
    saved = root.level
    try:
        main(counting_suite([]), ["-v", level])
        assert root.level == expected
    finally:
        root.setLevel(saved)


# -- a signal the exec tester relays is one interrupt ---------------------------------------------

def test_the_same_signal_twice_at_once_is_one_interrupt_later_a_second(env):
    from harness.config.settings import resolve

    runner = Runner(counting_suite([]), resolve({}, {}))
    runner._on_signal(signal.SIGTERM, None)
    runner._on_signal(signal.SIGTERM, None)  # relayed by kubetest2-tester-exec: not a second interrupt
    assert runner.cancel.is_set() and len(runner._signals) == 1
    runner._signals[0] -= 10
    with pytest.raises(KeyboardInterrupt):
        runner._on_signal(signal.SIGINT, None)


# -- e2e-framework's --context --------------------------------------------------------------------

TWO_CONTEXTS = """
apiVersion: v1
kind: Config
clusters:
- {name: a, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}
- {name: b, cluster: {server: "https://127.0.0.2:9", insecure-skip-tls-verify: true}}
users: [{name: u, user: {token: abc}}]
contexts: [{name: a, context: {cluster: a, user: u}}, {name: b, context: {cluster: b, user: u}}]
current-context: a
"""


def test_context_picks_the_kubeconfig_context(tmp_path):
    from harness.cluster.client import Cluster

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TWO_CONTEXTS)
    assert Cluster.connect(str(kubeconfig)).api.configuration.host == "https://127.0.0.1:9"
    assert Cluster.connect(str(kubeconfig), context="b").api.configuration.host == "https://127.0.0.2:9"


def test_an_unknown_context_is_a_configuration_error(env, tmp_path, monkeypatch, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TWO_CONTEXTS)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    suite = Suite("unit-suite", "needs a cluster")
    suite.test("TestX")(lambda t: None)
    assert main(suite, ["--context=c"]) == EXIT_USAGE
    assert f"load kubeconfig {kubeconfig} context c" in capsys.readouterr().err
