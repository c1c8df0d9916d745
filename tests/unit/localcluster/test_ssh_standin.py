"""The ssh/sshd stand-ins of MPIJob pods (localcluster/hostnodes/ssh_standin.py, mpi_pods.py), without a
cluster: ssh's command line, the DNS registry, how the node agent adapts a launcher's and a
worker's container, and real OpenMPI (mpirun, orted) through two sshd stand-ins standing in for two
worker pods."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from polling import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.hostnodes.container_view import ContainerView
from localcluster.hostnodes.mpi_pods import LOOPBACK_MCA, SSHD_SESSION_PATH, MpiPodAdapter, PodDns
from localcluster.hostnodes.sessions import container_alive, session_members, signal_container
from localcluster.hostnodes.ssh_standin import STANDIN_SCRIPT, parse_ssh, public_keys, resolve
from localcluster.hostnodes.volumes import PathMap

MPIRUN_LOST_A_DAEMON = ("ORTE has lost communication with a remote daemon",
                        "ORTE was unable to reliably start one or more daemons")
KEY = "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjE= mpi-operator\n"


def test_ssh_command_line_as_openmpi_writes_it():
    options, host, command = parse_ssh(["-o", "ConnectionAttempts=10", "-x", "-p22", "root@w-0.j.ns.svc",
                                        "orted", "-mca", "ess", '"env"'])
    assert options == {"connectionattempts": "10"}
    assert host == "w-0.j.ns.svc"
    assert command == ["orted", "-mca", "ess", '"env"']
    assert parse_ssh(["-oConnectTimeout 5", "h", "true"])[0] == {"connecttimeout": "5"}


def test_public_keys_ignore_options_and_comments():
    assert public_keys(f'from="10.0.0.1" {KEY}# note\nssh-ed25519 AAAAC3 x\n') == {
        ("ecdsa-sha2-nistp521", "AAAAE2VjZHNhLXNoYTItbmlzdHA1MjE="), ("ssh-ed25519", "AAAAC3")}


def test_names_resolve_as_the_cluster_dns_would(tmp_path: Path):
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "j-worker-0.j.json").write_text(json.dumps({"pod": "j-worker-0", "socket": "s"}))
    searches = ["ns.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    for name in ("j-worker-0.j.ns.svc", "j-worker-0.j.ns.svc.cluster.local.", "j-worker-0.j", "j-worker-0.j.ns"):
        assert resolve(name, tmp_path, searches) == {"pod": "j-worker-0", "socket": "s"}, name
    assert resolve("j-worker-0", tmp_path, searches) is None  # a bare pod name is no DNS name
    assert resolve("j-worker-0", tmp_path, ["j.ns.svc.cluster.local"]) is not None  # with the worker's search
    assert resolve("j-worker-1.j.ns.svc", tmp_path, searches) is None
    assert resolve("j-worker-0.j.other.svc", tmp_path, searches) is None


def mpi_pod(role: str, name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {"training.kubeflow.org/job-role": role}},
            "spec": {"hostname": name, "subdomain": "j", "nodeName": "kwok-cpu-1"}}


def adapted(tmp_path: Path, role: str, argv: list[str], env: dict[str, str] | None = None) -> ContainerView:
    pod = mpi_pod(role, f"j-{role}")
    spec = {"volumeMounts": [{"name": "ssh-auth", "mountPath": "/root/.ssh"}]}
    paths = PathMap((("/tmp", tmp_path / "tmp"), ("/root/.ssh", tmp_path / "volumes" / "ssh-auth")))
    view = ContainerView(argv, {"PATH": "/venv/bin:/usr/bin", "HOME": "/root", "LANG": "C.UTF-8",
                                "TMPDIR": str(tmp_path / "tmp"), **(env or {})}, str(tmp_path), paths)
    return MpiPodAdapter(pod, PodDns(tmp_path / "dns"), tmp_path / "bin")(spec, view)


def test_the_launcher_gets_ssh_first_on_path_loopback_tcp_and_its_ranks_folder(tmp_path: Path):
    view = adapted(tmp_path, "launcher", ["mpirun", "-np", "2", "x"])
    assert view.env["PATH"] == f"{tmp_path / 'bin'}:/venv/bin:/usr/bin"
    assert (view.env["OMPI_MCA_oob_tcp_if_include"], view.env["OMPI_MCA_btl_tcp_if_include"]) == ("lo", "lo")
    assert view.env["PWD"] == "/proc/self/cwd"
    ssh = (tmp_path / "bin" / "ssh").read_text()
    assert "--pod ns/j-launcher" in ssh and f"--key-dir {tmp_path / 'volumes' / 'ssh-auth'}" in ssh
    assert "--search ns.svc.cluster.local" in ssh
    # A launcher that picks interfaces itself keeps its choice (include beside exclude is an error).
    chosen = adapted(tmp_path, "launcher", ["mpirun", "--mca", "btl_tcp_if_exclude", "lo,docker0", "x"])
    assert "OMPI_MCA_btl_tcp_if_include" not in chosen.env and chosen.env["OMPI_MCA_oob_tcp_if_include"] == "lo"


def test_a_workers_sshd_becomes_the_stand_in_with_an_sshd_session_environment(tmp_path: Path):
    view = adapted(tmp_path, "worker", ["/usr/sbin/sshd", "-De"], env={"NODE_NAME": "kwok-cpu-1"})
    assert view.argv[:4] == [sys.executable, "-I", str(STANDIN_SCRIPT), "sshd"]
    options = dict(zip(view.argv[4::2], view.argv[5::2], strict=False))
    assert options["--socket"] == "kt2t-sshd/uid-j-worker" and options["--hostname"] == "j-worker"
    assert options["--authorized-keys"] == str(tmp_path / "volumes" / "ssh-auth" / "authorized_keys")
    session = [view.argv[i + 1] for i, arg in enumerate(view.argv) if arg == "--env"]
    assert f"PATH={tmp_path / 'bin'}:{SSHD_SESSION_PATH}" in session
    assert f"TMPDIR={tmp_path / 'tmp'}" in session
    assert not any(item.startswith("NODE_NAME=") for item in session)  # sshd does not pass the pod's env on
    assert view.argv[-2:] == ["--", "-De"]


def test_dns_records_follow_their_pod(tmp_path: Path):
    dns = PodDns(tmp_path)
    first, second = mpi_pod("worker", "j-worker-0"), mpi_pod("worker", "j-worker-0")
    second["metadata"]["uid"] = "uid-2"
    dns.register(first)
    dns.register(second)  # a new pod of the same name takes the name over ...
    dns.unregister(first)  # ... and the old one's going does not remove it
    assert resolve("j-worker-0.j.ns.svc", tmp_path, [])["uid"] == "uid-2"
    dns.remove_missing({"uid-other"})
    assert resolve("j-worker-0.j.ns.svc", tmp_path, []) is None


@dataclass
class Workers:
    """Two sshd stand-ins in sessions of their own, as the node agent runs workers' containers."""

    root: Path
    sessions: list[int]
    ssh_bin: Path
    hostfile: Path


def start_sshd(root: Path, name: str, registry: Path, keys: Path) -> int:
    folder = root / name
    (folder / "tmp").mkdir(parents=True)
    socket_name = f"kt2t-sshd/test-{uuid.uuid4().hex}"
    (registry / f"{name}.j.json").write_text(json.dumps({"pod": name, "socket": socket_name}))
    env = [f"PATH={root / 'bin'}:{SSHD_SESSION_PATH}", f"HOME={folder}", "SHELL=/bin/sh", f"TMPDIR={folder / 'tmp'}"]
    argv = [sys.executable, "-I", str(STANDIN_SCRIPT), "sshd", "--socket", socket_name, "--hostname", name,
            "--authorized-keys", str(keys / "authorized_keys"), *(a for e in env for a in ("--env", e)), "--", "-De"]
    log = (root / f"{name}.log").open("wb")
    process = subprocess.Popen(argv, cwd=folder, stdout=log, stderr=log, start_new_session=True)
    return process.pid


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    registry, keys, bin_dir = tmp_path / "dns" / "ns", tmp_path / "keys", tmp_path / "bin"
    for folder in (registry, keys, bin_dir):
        folder.mkdir(parents=True)
    (keys / "id_rsa.pub").write_text(KEY)
    (keys / "authorized_keys").write_text(KEY)
    sessions = [start_sshd(tmp_path, f"j-worker-{i}", registry, keys) for i in range(2)]
    # Each stand-in says when it listens: a test connects then, not after a guess of how long a
    # Python start takes on a loaded host (ConnectionAttempts alone flaked under CI load).
    for i in range(2):
        log = tmp_path / f"j-worker-{i}.log"
        wait_for(lambda log=log: "listening as" in log.read_text(errors="replace"), 60,
                   f"the sshd stand-in j-worker-{i} to listen ({log})")
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\nexec {sys.executable} -I {STANDIN_SCRIPT} ssh --registry {registry.parent} '
                   f'--pod ns/j-launcher --key-dir {keys} --search ns.svc.cluster.local -- "$@"\n')
    ssh.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"j-worker-{i}.j.ns.svc slots=2\n" for i in range(2)))
    yield Workers(tmp_path, sessions, ssh, hostfile)
    for session in sessions:
        signal_container(session, signal.SIGKILL)


def test_ssh_runs_the_command_in_the_worker_and_returns_its_status(workers: Workers):
    done = subprocess.run([str(workers.ssh_bin), "-o", "ConnectionAttempts=5", "j-worker-1.j.ns.svc",
                           "echo", "$(uname -n)", "$(pwd -P)", "$TMPDIR;", "echo oops >&2;", "exit 4"],
                          capture_output=True, text=True, timeout=30, check=False)
    folder = workers.root / "j-worker-1"
    assert (done.returncode, done.stderr) == (4, "oops\n")
    host = done.stdout.split()[0]
    assert done.stdout.split()[1:] == [str(folder), str(folder / "tmp")]
    assert host in ("j-worker-1", os.uname().nodename)  # its own UTS namespace where allowed (root)
    refused = subprocess.run([str(workers.ssh_bin), "nosuch.j.ns.svc", "true"], capture_output=True, text=True,
                             timeout=30, check=False)
    assert refused.returncode == 255 and "Could not resolve hostname nosuch.j.ns.svc" in refused.stderr


def test_a_key_that_is_not_authorized_is_refused(workers: Workers):
    (workers.root / "keys" / "authorized_keys").write_text("ssh-ed25519 AAAAother x\n")
    # ConnectionAttempts as above: under load the worker's stand-in sshd may not listen yet (a CI flake).
    done = subprocess.run([str(workers.ssh_bin), "-o", "ConnectionAttempts=5", "j-worker-0.j", "true"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 255 and "Permission denied (publickey)." in done.stderr, done.stderr


def mpirun(workers: Workers, program: str, np: int = 4) -> subprocess.Popen[str]:
    loopback = {f"OMPI_MCA_{family}_if_include": value for family, value in LOOPBACK_MCA.items()}
    env = {**os.environ, "PATH": f"{workers.ssh_bin.parent}:{os.environ['PATH']}", **loopback,
           "OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_orte_default_hostfile": str(workers.hostfile),
           "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10", "PWD": "/proc/self/cwd"}
    launcher = workers.root / "launcher"
    launcher.mkdir(exist_ok=True)
    argv = ["mpirun", "--allow-run-as-root", "--tag-output", "-np", str(np), "-bind-to", "none", "-map-by", "slot",
            "sh", "-c", program]
    return subprocess.Popen(argv, cwd=launcher, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


needs_openmpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI not installed (hack/setup.sh)")


@needs_openmpi
def test_mpirun_starts_each_rank_in_its_workers_folder_and_session(workers: Workers):
    program = "echo rank=$OMPI_COMM_WORLD_RANK local=$OMPI_COMM_WORLD_LOCAL_RANK cwd=$(pwd -P) " \
              "sid=$(cut -d' ' -f6 /proc/self/stat)"
    out, _ = mpirun(workers, program).communicate(timeout=60)
    lines = sorted(line for line in out.splitlines() if line.startswith("[1,"))
    expected = []
    for rank in range(4):
        worker = rank // 2
        expected.append(f"[1,{rank}]<stdout>:rank={rank} local={rank % 2} "
                        f"cwd={workers.root / f'j-worker-{worker}'} sid={workers.sessions[worker]}")
    assert lines == expected, out


@needs_openmpi
def test_killing_a_worker_ends_mpirun_naming_it(workers: Workers):
    run = mpirun(workers, "echo started; exec sleep 60")
    wait_for(lambda: len(session_members(workers.sessions[1])) >= 4, 60,  # sshd, orted, 2 ranks
               "worker 1's orted and its 2 ranks to run")
    signal_container(workers.sessions[1], signal.SIGTERM)
    out, _ = run.communicate(timeout=30)
    assert run.returncode != 0
    # Which of the two mpirun notices first (its ssh ended, or its daemon's connection) is a race,
    # as with real ssh; either way the worker is named (ssh's own line, or mpirun's).
    assert any(words in out for words in MPIRUN_LOST_A_DAEMON), out
    assert "Connection to j-worker-1.j.ns.svc closed by remote host." in out or "on node j-worker-1.j.ns.svc" in out
    # The worker's processes go once signalled: awaited, not assumed gone after a fixed 0.5 s.
    wait_for(lambda: not container_alive(workers.sessions[1]), 30, "worker 1's processes to end")
