"""Every flag upstream's test binaries accept is accepted here, with its effect or a warning; and
the selection (Go's -test.run/-test.skip, e2e-framework's features, labels and assessments)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config.settings import SETTINGS_BY_FLAG, Verbosity, resolve
from harness.errors import ConfigError
from harness.framework.cli import parse_args
from harness.framework.suite import Feature, Selector, Suite, TestCase, describe_selection, feature_name
from testbins import e2e_nvidia, e2e_nvidia_training
from testbins.nvidia import dcgm
from testbins.nvidia.mpi import UPSTREAM_NCCL_TESTS
from testbins.nvidia_training.bert import bert_workload
from testbins.nvidia_training.common import workload_size

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream-flags"


def upstream_flags(binary: str) -> list[tuple[str, bool]]:
    """(flag name, is boolean) from upstream's -h: a flag with no type word is a boolean."""
    flags = []
    for line in (FIXTURES / f"{binary}.txt").read_text().splitlines():
        if line.startswith("-"):
            name, *kind = line[1:].split()
            flags.append((name, not kind))
    return flags


@pytest.mark.parametrize("binary", ["nvidia.test", "nvidia-training.test"])
def test_every_flag_of_upstreams_binaries_is_accepted_with_its_kind(binary):
    flags = upstream_flags(binary)
    assert len(flags) > 60, flags  # Go's test flags, e2e-framework's, klog's and the suite's
    for name, is_bool in flags:
        setting = SETTINGS_BY_FLAG.get(name)
        assert setting is not None, f"-{name} of upstream's {binary} is not accepted"
        assert setting.is_bool_flag == is_bool, f"-{name}: boolean upstream is {is_bool}"


def values_for(name: str, is_bool: bool) -> list[str]:
    """A command line giving the flag a valid value."""
    samples = {"test.count": "2", "test.parallel": "4", "test.shuffle": "7", "test.timeout": "1m", "v": "2",
               "labels": "suite=nvidia", "skip-labels": "hardware=efa", "metricDimensions": "a=b",
               "nodeType": "p5.48xlarge", "nvidiaTestImage": "repo/nccl:1", "pytorchImage": "repo/pt:1",
               "bertTrainingImage": "repo/bert:1", "kubeconfig": "/tmp/kubeconfig", "namespace": "ns",
               "test.v": "test2json", "dcgmDiagLevel": "3", "dcgmDiagTimeoutMinutes": "90",
               "timeSlicingReplicas": "4", "mpsReplicas": "2"}
    if is_bool:
        return [f"-{name}"]
    return [f"-{name}", samples.get(name, "x")]


@pytest.mark.parametrize("binary", ["nvidia.test", "nvidia-training.test"])
def test_every_upstream_flag_resolves_and_a_flag_without_effect_says_what_it_would_do(binary):
    for name, is_bool in upstream_flags(binary):
        cfg = resolve(parse_args(values_for(name, is_bool)), {})
        setting = SETTINGS_BY_FLAG[name]
        ignored = dict(cfg.ignored_flags)
        if setting.no_effect is not None:
            assert ignored == {f"-{name}": setting.no_effect}, name
        else:
            assert not ignored, name
            assert cfg.origin(setting.name).source.value == "flag"


def test_a_flag_without_effect_still_needs_a_well_formed_value():
    with pytest.raises(ConfigError, match="--test.benchmem='sometimes' is invalid: expected true or false"):
        resolve(parse_args(["--test.benchmem=sometimes"]), {})


def test_test_v_takes_test2json():
    assert resolve(parse_args(["-test.v=test2json"]), {}).test_v is Verbosity.TEST2JSON
    assert resolve(parse_args(["-test.v"]), {}).test_v is Verbosity.VERBOSE
    assert not resolve(parse_args(["--test.v=false"]), {}).verbose
    with pytest.raises(ConfigError, match="expected true, false or test2json"):
        resolve(parse_args(["-test.v=json"]), {})


@pytest.mark.parametrize(("argv", "needle"), [
    (["-test.count=0"], "-test.count='0'"), (["-test.shuffle=sometimes"], "-test.shuffle='sometimes'"),
    (["--labels=suite"], "--labels='suite'"), (["--labels=a=b=c"], "--labels='a=b=c'"),
    (["-v=loud"], "-v='loud'"), (["-test.skip=Test[("], "-test.skip='Test[('"),
])
def test_malformed_new_flags_name_the_flag_and_value(argv, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        resolve(parse_args(argv), {})


def test_pytorch_and_bert_images_configure_different_tests():
    cfg = resolve(parse_args(["--pytorchImage=repo/pt:1", "--bertTrainingImage=repo/bert:2"]), {})
    assert (cfg.pytorch_image, cfg.bert_training_image) == ("repo/pt:1", "repo/bert:2")


def test_training_command_runs_the_images_own_program_for_bert():
    cfg = resolve(parse_args([]), {"TRAINING_COMMAND": "python train.py --epochs 1"})
    assert bert_workload(cfg).program() == ["python", "train.py", "--epochs", "1"]
    ours = bert_workload(resolve(parse_args([]), {}))
    assert ours.program()[:3] == ["python", "-m", "workloads.bert"]


def test_short_makes_the_workloads_tiny():
    assert workload_size(resolve(parse_args(["-test.short"]), {}), "bert") == "tiny"
    assert workload_size(resolve(parse_args([]), {}), "bert") == "base"
    assert workload_size(resolve(parse_args(["-test.short"]), {"WORKLOAD_SIZE": "large"}),
                                             "bert") == "large"  # a size asked for wins


@pytest.mark.parametrize("size", ["gpt2-medium", "gpt2-large", "gpt2-xl"])
def test_a_gpt2_size_sizes_nanogpt_and_leaves_the_others_at_large(size):
    cfg = resolve(parse_args([]), {"WORKLOAD_SIZE": size})
    assert (workload_size(cfg, "nanogpt"), workload_size(cfg, "bert"), workload_size(cfg, "mnist")) == \
        (size, "large", "full")


def test_every_workload_size_names_a_size_of_every_workload():
    from harness.config.settings import WORKLOAD_SIZES
    from testbins.nvidia_training.common import SIZES

    assert all(set(sizes) == set(WORKLOAD_SIZES) for sizes in SIZES.values()), SIZES


# -- selection -----------------------------------------------------------------------------------

def names(selector: Selector, suite: Suite) -> list[str]:
    return [s.test.name if s.test.in_place else f"{s.test.name}/{f.name}"
            for s in selector.select(suite) for f in s.features]


def selector(*argv: str) -> Selector:
    return Selector.from_config(resolve(parse_args(list(argv)), {}))


def test_upstream_nccl_line_selects_the_three_multi_node_features():
    chosen = names(selector("--test.run=^TestMPIJobPytorchTraining$/multi-node"), e2e_nvidia.SUITE)
    assert chosen == [f"TestMPIJobPytorchTraining/multi-node:{op}" for op in UPSTREAM_NCCL_TESTS]


def test_upstream_bert_line_selects_bert():
    assert names(selector("--test.run=TestBertTraining"), e2e_nvidia_training.SUITE) == ["TestBertTraining"]


def test_a_one_feature_test_is_matched_as_test_slash_feature():
    suite = e2e_nvidia_training.SUITE
    assert names(selector("-test.run=TestBertTraining/bert"), suite) == ["TestBertTraining"]
    assert names(selector("-test.run=TestBertTraining/nothing"), suite) == []


def test_skip_is_go_s_skip():
    suite = e2e_nvidia.SUITE
    assert "TestMPIJobPytorchTraining/single-node" in names(
        selector("-test.run=TestMPI", "-test.skip=TestMPIJobPytorchTraining/multi"), suite)
    assert names(selector("-test.run=TestMPI", "-test.skip=TestMPIJobPytorchTraining/multi"), suite) == [
        "TestMPIJobPytorchTraining/single-node"]
    assert names(selector("-test.run=TestMPI", "-test.skip=TestMPI"), suite) == []  # the whole test


# upstream's deadline tests (dcgm_deadline_test.go) are plain Go tests, not e2e-framework features:
# --feature, --skip-features, --labels and --skip-labels leave them in, as upstream's binary does.
DEADLINE = [*(f"TestDcgmDiagDeadlineSeconds/{case}" for case, _, _ in dcgm.DEADLINE_CASES),
            "TestDcgmDiagDeadlineAlwaysPositive"]


def test_feature_filters_use_feature_names_not_test_names():
    suite = e2e_nvidia.SUITE
    assert names(selector("--feature=unit-test"), suite) == ["TestSingleNodeUnitTest/unit-test", *DEADLINE]
    assert names(selector("--feature=TestSingleNodeUnitTest"), suite) == DEADLINE
    assert "TestMPIJobPytorchTraining/single-node" not in names(selector("--skip-features=single-node"), suite)


def test_labels_need_every_key_and_skip_labels_any():
    suite = e2e_nvidia.SUITE
    efa = names(selector("--labels=suite=nvidia,hardware=efa"), suite)
    assert efa == ["TestNCCLTests/multi-node"] + [f"TestMPIJobPytorchTraining/multi-node:{op}"
                                                   for op in UPSTREAM_NCCL_TESTS] + DEADLINE
    no_gpu = names(selector("--skip-labels=hardware=gpu"), suite)
    assert no_gpu == ["TestNvidiaDriverCapabilities", *DEADLINE, "TestContainerdConfig"]
    assert names(selector("--labels=suite=neuron"), suite) == DEADLINE


# upstream's Assess(...) names (test/cases/nvidia*/*_test.go), feature by feature.
UPSTREAM_ASSESSMENTS = {
    ("TestMPIJobPytorchTraining", "single-node"): ("MPIJob succeeds",),
    **{("TestMPIJobPytorchTraining", f"multi-node:{op}"): ("MPIJob succeeds",)
       for op in UPSTREAM_NCCL_TESTS},
    ("TestSingleNodeUnitTest", "unit-test"): ("Unit test Job succeeds",),
    ("TestSingleNodeUnitTest", "hpc-benckmarks"): ("HPC test Job succeeds",),
    ("TestNvidiaDriverCapabilities", "nvidia-driver-capabilities-check"): ("Check Pod becomes ready",),
    ("TestContainerdConfig", "containerd-config-check"): ("DaemonSet becomes ready",),
    ("TestDcgmDiagnostics", "dcgm-diag"): ("DCGM level-4 diagnostic passes",),  # fmt.Sprintf with the level
    # dcgm_deadline_test.go: plain Go tests, t.Run cases, no assessment
    **{("TestDcgmDiagDeadlineSeconds", case): () for case, _, _ in dcgm.DEADLINE_CASES},
    ("TestDcgmDiagDeadlineAlwaysPositive", "dcgm-diag-deadline-always-positive"): (),
    ("TestTimeSlicing", "time-slicing"): ("node advertises time-sliced GPUs",
                                          "oversubscribed pods share a physical GPU concurrently"),
    ("TestMps", "mps"): ("node advertises MPS-shared GPUs", "oversubscribed pods share a physical GPU concurrently",
                         "GPU is in EXCLUSIVE_PROCESS compute mode"),
    ("TestBertTraining", "bert-training"): ("BERT training Job succeeds",),
}


def test_upstream_features_carry_upstreams_assessment_names():
    cfg = resolve(parse_args([]), {})
    tests = e2e_nvidia.SUITE.tests + e2e_nvidia_training.SUITE.tests
    declared = {(t.name, f.name): f.assessment_names(cfg) for t in tests for f in t.features if t.upstream}
    assert declared == UPSTREAM_ASSESSMENTS


def kept_assessments(sel: Selector, suite: Suite) -> list[str]:
    """The assessments `sel` runs, test by test (`TestX: name`, as the run names them)."""
    return [f"{s.test.name}: {name}" for s in sel.select(suite) for f in s.features
            for name in f.assessment_names(sel.cfg) if sel.assessment_skip(name) is None]


def test_assess_filters_upstreams_names_the_dcgm_level_included():
    suite = e2e_nvidia.SUITE
    assert kept_assessments(selector("--assess=DaemonSet"), suite) == ["TestContainerdConfig: DaemonSet becomes ready"]
    assert kept_assessments(selector("--assess=oversubscribed pods share"), suite) == [
        "TestTimeSlicing: oversubscribed pods share a physical GPU concurrently",
        "TestMps: oversubscribed pods share a physical GPU concurrently"]
    assert kept_assessments(selector("--assess=EXCLUSIVE_PROCESS"), suite) == [
        "TestMps: GPU is in EXCLUSIVE_PROCESS compute mode"]
    assert kept_assessments(selector("--assess=^DCGM level-4 "), suite) == [
        "TestDcgmDiagnostics: DCGM level-4 diagnostic passes"]
    assert kept_assessments(selector("--assess=^DCGM level-4 ", "--dcgmDiagLevel=2"), suite) == []
    assert kept_assessments(selector("--assess=^DCGM level-2 ", "--dcgmDiagLevel=2"), suite) == [
        "TestDcgmDiagnostics: DCGM level-2 diagnostic passes"]
    kept = kept_assessments(selector("--skip-assessment=node advertises|oversubscribed|EXCLUSIVE_PROCESS"), suite)
    assert not any(name.startswith(("TestTimeSlicing:", "TestMps:")) for name in kept)
    assert "TestDcgmDiagnostics: DCGM level-4 diagnostic passes" in kept


@pytest.mark.parametrize("suite", [e2e_nvidia.SUITE, e2e_nvidia_training.SUITE], ids=lambda s: s.binary)
def test_assess_keeps_every_feature_as_e2e_framework_does(suite):
    """e2e-framework runs a feature whatever --assess says (setup, teardown; its assessments skipped
    one by one: test_dropin_runner), so every feature of both binaries stays selected. Before every
    feature ran its assessments through t.assessment, --assess=DaemonSet kept TestContainerdConfig alone."""
    everything = names(selector(), suite)
    assert names(selector("--assess=no such assessment"), suite) == everything
    assert names(selector("--assess=DaemonSet"), suite) == everything
    assert names(selector("--skip-assessment=."), suite) == everything


def test_assessment_skip_says_why_as_e2e_framework_does():
    sel = selector("--assess=^BERT training", "--skip-assessment=resumes")
    assert sel.assessment_skip("BERT training Job succeeds") is None
    assert sel.assessment_skip("training succeeds") == 'Skipping assessment "training succeeds": name not matched'
    assert sel.assessment_skip("BERT training resumes") == 'Skipping assessment: "BERT training resumes": name matched'


def test_every_upstream_test_and_feature_is_declared_with_upstreams_labels():
    features = {(t.name, f.name): f for t in e2e_nvidia.SUITE.tests + e2e_nvidia_training.SUITE.tests
                for f in t.features}
    gpu, efa = {"suite": ("nvidia",), "hardware": ("gpu",)}, {"suite": ("nvidia",), "hardware": ("gpu", "efa")}
    expected = {("TestMPIJobPytorchTraining", "single-node"): gpu,
                **{("TestMPIJobPytorchTraining", f"multi-node:{op}"): efa for op in UPSTREAM_NCCL_TESTS},
                ("TestSingleNodeUnitTest", "unit-test"): gpu, ("TestSingleNodeUnitTest", "hpc-benckmarks"): gpu,
                ("TestNvidiaDriverCapabilities", "nvidia-driver-capabilities-check"): {"suite": ("nvidia",)},
                ("TestContainerdConfig", "containerd-config-check"): {"suite": ("nvidia",)},
                ("TestBertTraining", "bert-training"): gpu}
    for key, labels in expected.items():
        assert key in features, key
        assert dict(features[key].labels) == labels, key


def test_describe_selection_names_the_flags_given():
    cfg = resolve(parse_args(["-test.run=^X$", "--labels=suite=nvidia"]), {})
    assert describe_selection(cfg) == "-test.run='^X$' --labels='suite=nvidia'"


def test_feature_names_default_from_the_test_name():
    assert feature_name("TestNanoGPTTraining") == "nano-gpt-training"
    assert feature_name("TestNCCLAllReduce") == "nccl-all-reduce"


def test_two_tests_of_one_name_are_refused():
    suite = Suite("s", "x", [TestCase("TestA", (Feature("a", lambda t: None),))])
    with pytest.raises(ValueError, match="two tests named TestA"):
        suite.features("TestA", [Feature("b", lambda t: None)])
