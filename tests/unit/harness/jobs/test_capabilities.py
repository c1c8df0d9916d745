"""Capabilities (issue 23 item 6, issue 33 item 4): in this project's images each pod keeps what its
program needs, all else dropped; any other image (upstream's) keeps the runtime's defaults, as
upstream's manifests leave them.

Rendering: per-node pods of our images add exactly their Workload's capabilities; MPI workers
sshd's; nothing else adds any. Other images: no drop, only what a program needs beyond the
defaults added (DCGM's SYS_ADMIN).

On this machine: what apt does with root's privileges, step by step (a folder chowned to another
user, a process run as that user writing in it, root reading and re-dating its file, root stopping
that process), run with a capability bounding set of exactly APT_CAPABILITIES (capsh, as a
container's runtime sets it) in a private mount namespace on a tmpfs: it passes, and fails with
any one of them dropped. Not apt-get itself: `apt-get install` here would change this machine's
packages; it runs on a real node (the real-node test of TestNvidiaDriverCapabilities). sshd is not
installed here, so the MPI workers' set is proven by the MPIJob run over real sshd on real nodes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cluster.manifests import render
from harness.config.settings import DCGM_IMAGE, NCCL_TESTS_IMAGE
from harness.jobs.launchers import LAUNCHERS
from harness.jobs.launchers.mpi import SSHD_CAPABILITIES
from harness.jobs.workload import Workload
from testbins.nvidia.capabilities import APT_CAPABILITIES, CAPABILITIES_IMAGE
from testbins.nvidia.dcgm import DCGM_CAPABILITIES
from tests.unit.harness.jobs.test_pod_resources import placement

OURS, UPSTREAMS = NCCL_TESTS_IMAGE, "public.ecr.aws/example/upstream-nvidia-test:1"


def security_contexts(launcher: str, workload: Workload, image: str = OURS) -> dict[str, dict]:
    found = {}
    for r in LAUNCHERS[launcher].renderings(workload, replace(placement(), image=image)):
        for obj in render(r.template, r.fields):
            templates = (obj["spec"]["mpiReplicaSpecs"] if obj["kind"] == "MPIJob"
                         else {"worker": obj["spec"]["replicaSpecs"]["worker"]} if obj["kind"] == "ElasticJob"
                         else {obj["kind"]: obj["spec"]} if obj["kind"] in ("Job", "DaemonSet") else {})
            for role, spec in templates.items():
                found[role] = spec["template"]["spec"]["containers"][0]["securityContext"]
    return found


def test_per_node_pods_of_our_images_add_exactly_their_workloads_capabilities():
    plain = security_contexts("per-node", Workload("probe", binary="nvidia-smi"))["Job"]
    assert plain["capabilities"] == {"drop": ["ALL"]}
    apt = security_contexts("per-node", Workload("moderngl", binary="bash", capabilities=APT_CAPABILITIES))["Job"]
    assert apt["capabilities"] == {"drop": ["ALL"], "add": list(APT_CAPABILITIES)}
    assert apt["allowPrivilegeEscalation"] is False
    assert {"CHOWN", "SETUID", "SETGID"} <= set(APT_CAPABILITIES)


def test_mpi_workers_of_our_images_keep_sshds_capabilities_and_the_launcher_none():
    contexts = security_contexts("mpi", Workload("bert", "workloads.bert"))
    assert contexts["Launcher"]["capabilities"] == {"drop": ["ALL"]}
    assert contexts["Worker"]["capabilities"] == {"drop": ["ALL"], "add": list(SSHD_CAPABILITIES)}
    assert SSHD_CAPABILITIES == ("NET_BIND_SERVICE", "SYS_CHROOT", "SETUID", "SETGID", "KILL")


@pytest.mark.parametrize("launcher", ["torchrun", "daemonset", "shared-gpu"])
def test_single_program_pods_of_our_images_drop_every_capability(launcher):
    for context in security_contexts(launcher, Workload("x", "workloads.bert", host_paths={"/h": "/etc"})).values():
        assert context == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("launcher", ["mpi", "per-node", "torchrun", "daemonset", "shared-gpu"])
def test_other_images_keep_the_runtimes_default_capabilities(launcher):
    # upstream's images (Ubuntu sshd with PAM, dcgmi, HPL's mpirun, apt) run with the runtime's defaults,
    # as upstream's manifests leave them: the reduced sets were proven on our images only.
    contexts = security_contexts(launcher, Workload("x", "workloads.bert", host_paths={"/h": "/etc"}), UPSTREAMS)
    assert contexts
    for role, context in contexts.items():
        added = list(SSHD_CAPABILITIES) if role == "Worker" else None
        assert context == ({"capabilities": {"add": added}} if added else {}), role
        assert "drop" not in context.get("capabilities", {}), role


def test_our_images_spelled_in_full_are_ours():
    # what hack/images name prints, and the real-node tests run (apt's set proven on it)
    full = f"docker.io/{OURS}"
    assert security_contexts("per-node", Workload("p", binary="true"), full)["Job"]["capabilities"] == {"drop": ["ALL"]}


def test_other_images_get_what_a_program_needs_beyond_the_defaults():
    dcgm = security_contexts("per-node", Workload("dcgm", binary="bash", capabilities=DCGM_CAPABILITIES),
                             DCGM_IMAGE)["Job"]
    assert dcgm == {"capabilities": {"add": ["SYS_ADMIN"]}}  # nothing dropped
    # upstream's driver-capabilities check runs public ubuntu: apt keeps the runtime's defaults
    apt = security_contexts("per-node", Workload("moderngl", binary="bash", capabilities=APT_CAPABILITIES),
                            CAPABILITIES_IMAGE)["Job"]
    assert "drop" not in apt["capabilities"]


# apt's steps with root's privileges; `nobody` stands for `_apt`.
APT_STEPS = (Path(__file__).parent / "apt-steps.sh").read_text()


def every_capability() -> list[str]:
    text = subprocess.run(["capsh", "--print"], capture_output=True, text=True, check=True).stdout
    bounding = re.search(r"^Bounding set =(.*)$", text, re.MULTILINE)
    assert bounding is not None, text
    return [name.strip().removeprefix("cap_").upper() for name in bounding[1].split(",") if name.strip()]


def run_with_only(capabilities: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """APT_STEPS with the bounding set cut to `capabilities`, on a tmpfs no one else sees."""
    dropped = ",".join(f"cap_{c.lower()}" for c in every_capability() if c not in capabilities)
    script = (f"mount -t tmpfs kt2t-caps /mnt && capsh --drop={dropped} -- -c {shlex_quote(APT_STEPS)} "
              "apt-steps /mnt")
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


_skip_without_root_tools = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("capsh") and shutil.which("unshare") and shutil.which("setpriv")),
    reason="needs root, capsh (libcap2-bin), unshare and setpriv (util-linux) for a private mount namespace")


def needs_root_tools(test: Callable[[], None]) -> Callable[[], None]:
    """Skips without root and the tools; as root a skip fails the run (tests/tiers.py, root_only):
    localcluster/base/system_packages.txt installs capsh, so a skip there is lost coverage."""
    return pytest.mark.root_only(_skip_without_root_tools(test))


@needs_root_tools
def test_apts_steps_pass_with_exactly_its_capabilities():
    done = run_with_only(APT_CAPABILITIES)
    assert "APT-STEPS-DONE" in done.stdout, done.stderr


@needs_root_tools
@pytest.mark.parametrize("missing", ["CHOWN", "SETUID", "SETGID", "DAC_OVERRIDE", "FOWNER", "KILL"])
def test_apts_steps_fail_without_any_one_of_them(missing):
    done = run_with_only(tuple(c for c in APT_CAPABILITIES if c != missing))
    assert done.returncode != 0 and "APT-STEPS-DONE" not in done.stdout, (missing, done.stdout, done.stderr)
