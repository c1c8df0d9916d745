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

BINARIES = ["e2e-nvidia-training", "e2e-nvidia", "kubetest2-tester-training"]


def binary(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed in {Path(sys.executable).parent} (pip install -e .)")
    return path


def run(name: str, *args: str, env: dict[str, str] | None = None, artifacts: Path | None = None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_COUNT")}
    full_env.update(env or {})
    if artifacts is not None:
        full_env["ARTIFACTS"] = str(artifacts)
    # A kubeconfig pointing nowhere: nothing here may contact a cluster.
    full_env.setdefault("KUBECONFIG", "/nonexistent/kubeconfig")
    return subprocess.run([binary(name), *args], capture_output=True, text=True, env=full_env, timeout=60,
                          check=False)


@pytest.mark.parametrize("name", ["e2e-nvidia-training"])
@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--help", "--test.run=X", "--nodeType=y"]])
def test_help_exits_0_with_usage_on_stdout(name, args, tmp_path):
    done = run(name, *args, artifacts=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: {name}")
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
    kubeconfig = tmp_path / "kubeconfig"
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    kubeconfig.write_text("""
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
""")
    done = run("e2e-nvidia-training", "--test.run=TestBertTraining", artifacts=tmp_path,
               env={"KUBECONFIG": str(kubeconfig)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "127.0.0.1:9" in done.stderr
    assert "contact the API server" in junit_error(tmp_path)


def test_importing_harness_and_testbins_loads_no_torch():
    code = ("import sys, harness, harness.runner, harness.jobs, harness.metrics, testbins.e2e_nvidia_training, "
            "testbins.e2e_nvidia, testbins.kubetest2_tester_training; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'lightning')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_help_does_not_import_the_kubernetes_client():
    code = ("import sys, testbins.e2e_nvidia_training as b; from harness.runner import main; "
            "import contextlib, io; f = io.StringIO()\nwith contextlib.redirect_stdout(f): main(b.SUITE, ['--help'])\n"
            "print('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
