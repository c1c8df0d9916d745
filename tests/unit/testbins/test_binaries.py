"""The console scripts as CI runs them: --help, --test.list, usage and configuration errors.

These run the installed binaries as subprocesses with no cluster: every path here must answer
without contacting one (exit 2 paths create nothing), and always leave a parseable JUnit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest

BINARIES = ["e2e-nvidia-training", "e2e-nvidia", "kubetest2-tester-training", "nvidia.test", "nvidia-training.test"]


def binary(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed in {Path(sys.executable).parent} (pip install -e .)")
    return path


def run(name: str, *args: str, env: dict[str, str] | None = None, artifacts: Path | None = None,
        prefix: tuple[str, ...] = ()):
    full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_COUNT")}
    full_env.update(env or {})
    if artifacts is not None:
        full_env["ARTIFACTS"] = str(artifacts)
    # A kubeconfig pointing nowhere: nothing here may contact a cluster.
    full_env.setdefault("KUBECONFIG", "/nonexistent/kubeconfig")
    return subprocess.run([*prefix, binary(name), *args], capture_output=True, text=True, env=full_env, timeout=60,
                          check=False)


def unreachable_kubeconfig(folder: Path) -> Path:
    """A kubeconfig whose API server is 127.0.0.1:9: nothing listens, the connection is refused at once."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text("""
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
""")
    return kubeconfig


@pytest.mark.parametrize("name", ["e2e-nvidia-training", "nvidia.test", "nvidia-training.test"])
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--help", "--test.run=X", "--nodeType=y"]])
def test_help_exits_0_with_usage_on_stdout(name, args, tmp_path):
    done = run(name, *args, artifacts=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ") and name in done.stdout.splitlines()[0]
    assert not any(tmp_path.iterdir())  # no side effects


def test_list_prints_test_names():
    done = run("e2e-nvidia-training", "--test.list=.")
    assert done.returncode == 0, done.stderr
    assert "TestBertTraining" in done.stdout.split()


def test_list_filters():
    done = run("e2e-nvidia-training", "-test.list", "Nothing")
    assert done.returncode == 0 and done.stdout == ""


def junit_error(artifacts: Path, name: str = "e2e-nvidia-training") -> str:
    xml = junitparser.JUnitXml.fromfile(str(artifacts / f"junit_{name}.xml"))
    (case,) = [c for suite in xml for c in suite]
    (result,) = case.result
    assert isinstance(result, junitparser.Error)
    return result.message


def test_bad_env_exits_2_naming_it_and_writes_junit(tmp_path):
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", env={"NODE_COUNT": "abc"},
               artifacts=tmp_path)
    assert done.returncode == 2
    assert "NODE_COUNT" in done.stderr and "abc" in done.stderr
    assert "NODE_COUNT='abc'" in junit_error(tmp_path)


def test_unknown_flag_exits_2_with_junit(tmp_path):
    done = run("e2e-nvidia-training", "--nodeTyp=p5", artifacts=tmp_path)
    assert done.returncode == 2
    assert "-nodeTyp" in done.stderr
    assert "nodeTyp" in junit_error(tmp_path)


def test_missing_kubeconfig_exits_2_naming_it(tmp_path):
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", artifacts=tmp_path,
               env={"KUBECONFIG": str(tmp_path / "missing.yaml")})
    assert done.returncode == 2
    assert "missing.yaml" in done.stderr
    assert "missing.yaml" in junit_error(tmp_path)


def test_unreachable_api_server_is_a_clear_error_within_seconds(tmp_path):
    kubeconfig = unreachable_kubeconfig(tmp_path)
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", artifacts=tmp_path,
               env={"KUBECONFIG": str(kubeconfig)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "127.0.0.1:9" in done.stderr
    assert "contact the API server" in junit_error(tmp_path)


def test_artifacts_that_is_a_file_is_a_configuration_error_before_the_cluster_is_contacted(tmp_path):
    artifacts = tmp_path / "artifacts"
    artifacts.write_text("a regular file")
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", artifacts=artifacts,
               env={"KUBECONFIG": str(unreachable_kubeconfig(tmp_path))})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"configuration error: ARTIFACTS={artifacts}: not a folder" in done.stderr
    assert "contact the API server" not in done.stdout + done.stderr
    assert artifacts.read_text() == "a regular file"


@pytest.fixture
def read_only_folder(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    yield folder
    folder.chmod(0o755)


def unprivileged() -> tuple[str, ...]:
    """root writes anywhere: as root the binary runs without the capabilities that override file
    permissions (as an unprivileged CI job would be)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to drop root's file-permission override")
    return (setpriv, "--bounding-set=-dac_override,-dac_read_search")


def test_artifacts_in_a_read_only_folder_is_a_configuration_error_naming_why(tmp_path, read_only_folder):
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", artifacts=read_only_folder,
               prefix=unprivileged(), env={"KUBECONFIG": str(unreachable_kubeconfig(tmp_path))})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"ARTIFACTS={read_only_folder}: cannot write there: Permission denied" in done.stderr
    assert "contact the API server" not in done.stdout + done.stderr
    assert not any(read_only_folder.iterdir())


def python_prints(code: str) -> str:
    """What a fresh interpreter prints running `code` (imports start from nothing)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_importing_harness_and_testbins_loads_no_torch():
    assert python_prints(
        "import sys, harness, harness.runner, harness.jobs.job, harness.metrics.records, testbins.e2e_nvidia_training, "
        "testbins.e2e_nvidia, testbins.kubetest2_tester_training; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'lightning')))") == "[]"


def test_help_loads_neither_the_kubernetes_client_nor_yaml():
    assert python_prints(
        "import sys, testbins.e2e_nvidia_training as b; from harness.runner import main; "
        "import contextlib, io; f = io.StringIO()\nwith contextlib.redirect_stdout(f): main(b.SUITE, ['--help'])\n"
        "print([m for m in ('kubernetes', 'urllib3', 'yaml', 'junit_xml') if m in sys.modules])") == "[]"
