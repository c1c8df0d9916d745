"""MPIJob pods (mpi-operator v2beta1, label `training.kubeflow.org/job-role`) on the local cluster:
mpirun in the launcher reaches its workers through an ssh stand-in (ssh_standin.py, hack/README.md).

- Every MPIJob pod gets `ssh` first on its PATH: a wrapper that knows the pod's namespace, its DNS
  search domains and the folder of its mounted ssh keys (the mount ending in `/.ssh`).
- A worker whose command is `sshd` (upstream's `/usr/sbin/sshd -De`) runs the sshd stand-in
  instead: it keeps the container running and starts what mpirun sends (`orted ...`) inside it.
- The launcher keeps OpenMPI's TCP on loopback (`OMPI_MCA_oob_tcp_if_include` and
  `OMPI_MCA_btl_tcp_if_include` = `lo`, unless the pod chooses those interfaces itself: the only
  network here; mpirun passes them on to its daemons), and `PWD=/proc/self/cwd`: OpenMPI takes the working folder it
  sends to the ranks from PWD when PWD names mpirun's cwd, and every pod's folder exists on this
  one machine, so without it the ranks would run in the launcher's folder; with it each rank
  stays in the folder its orted runs in, its worker's, as on separate nodes.

The cluster DNS of headless Services is a registry of files, `<state>/pod-dns/<namespace>/
<hostname>.<subdomain>.json`, one per running pod with a subdomain, naming its sshd's socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.base.annotations import MPI_ROLE_LABEL
from localcluster.hostnodes.container_view import ContainerView
from localcluster.hostnodes.ssh_standin import STANDIN_SCRIPT

# sshd's PATH for root's sessions (Debian's default), behind the ssh stand-in's folder.
SSHD_SESSION_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# OpenMPI's TCP (its daemons' out-of-band channel, MPI's byte transfer layer) on loopback.
LOOPBACK_MCA = {"oob_tcp": "lo", "btl_tcp": "lo"}
CLUSTER_DOMAIN = "cluster.local"


def mpi_role(pod: dict[str, Any]) -> str | None:
    """`launcher`, `worker`, or None for a pod that is not an MPIJob's."""
    return (pod["metadata"].get("labels") or {}).get(MPI_ROLE_LABEL)


def sshd_socket(uid: str) -> str:
    """The abstract socket a pod's sshd stand-in listens on (unique per pod, no file to clean)."""
    return f"kt2t-sshd/{uid}"


@dataclass(frozen=True)
class PodDns:
    """The headless Services' DNS records of pods, as files the ssh stand-in reads."""

    root: Path

    def entry(self, pod: dict[str, Any]) -> Path | None:
        meta, spec = pod["metadata"], pod["spec"]
        if not spec.get("subdomain"):
            return None
        return self.root / meta["namespace"] / f"{spec.get('hostname') or meta['name']}.{spec['subdomain']}.json"

    def register(self, pod: dict[str, Any]) -> None:
        path = self.entry(pod)
        if path is None:
            return
        meta = pod["metadata"]
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"pod": meta["name"], "uid": meta["uid"], "node": pod["spec"].get("nodeName", ""),
                  "socket": sshd_socket(meta["uid"])}
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(record))
        os.replace(partial, path)

    def unregister(self, pod: dict[str, Any]) -> None:
        """Removes the pod's record unless a newer pod of the same name took it over."""
        path = self.entry(pod)
        with contextlib.suppress(OSError, ValueError):
            if path is not None and json.loads(path.read_text())["uid"] == pod["metadata"]["uid"]:
                path.unlink()

    def remove_missing(self, live_uids: set[str]) -> None:
        """Removes the records of pods deleted while the agent was not watching."""
        for path in self.root.glob("*/*.json"):
            with contextlib.suppress(OSError, ValueError):
                if json.loads(path.read_text())["uid"] not in live_uids:
                    path.unlink()


@dataclass(frozen=True)
class MpiPodAdapter:
    """Adapts each container of one MPIJob pod (see the module docstring); an executor.ViewAdapter."""

    pod: dict[str, Any]
    dns: PodDns
    bin_dir: Path  # in the pod's scratch folder: its `ssh`

    def __call__(self, spec: dict[str, Any], view: ContainerView) -> ContainerView:
        self.write_ssh(ssh_key_dir(spec, view))
        view.env["PATH"] = f"{self.bin_dir}:{view.env['PATH']}"
        if Path(view.argv[0]).name == "sshd":
            view.argv = self.sshd_argv(spec, view)
        elif mpi_role(self.pod) == "launcher":
            for family, value in LOOPBACK_MCA.items():
                if not chooses_interfaces(family, view):
                    view.env[f"OMPI_MCA_{family}_if_include"] = value
            view.env.setdefault("PWD", "/proc/self/cwd")
        return view

    def searches(self) -> list[str]:
        """The pod's resolv.conf search list: its namespace's, then its dnsConfig's."""
        namespace = self.pod["metadata"]["namespace"]
        dns_config = self.pod["spec"].get("dnsConfig") or {}
        return [f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN,
                *(dns_config.get("searches") or [])]

    def write_ssh(self, key_dir: str) -> None:
        meta = self.pod["metadata"]
        options = ["--registry", str(self.dns.root), "--pod", f"{meta['namespace']}/{meta['name']}",
                   "--key-dir", key_dir, *(arg for domain in self.searches() for arg in ("--search", domain))]
        command = shlex.join([sys.executable, "-I", str(STANDIN_SCRIPT), "ssh", *options])
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        script = self.bin_dir / "ssh"
        script.write_text("#!/bin/sh\n# The local cluster's ssh stand-in (localcluster/hostnodes/mpi_pods.py).\n"
                          f'exec {command} -- "$@"\n')
        script.chmod(0o755)

    def sshd_argv(self, spec: dict[str, Any], view: ContainerView) -> list[str]:
        """The sshd stand-in, with the environment sshd gives a session (not the container's)."""
        meta = self.pod["metadata"]
        user = pwd.getpwuid(os.getuid())
        session_env = {
            "PATH": f"{self.bin_dir}:{SSHD_SESSION_PATH}", "HOME": view.env["HOME"], "USER": user.pw_name,
            "LOGNAME": user.pw_name, "SHELL": user.pw_shell or "/bin/sh", "LANG": view.env["LANG"],
            "TMPDIR": view.env["TMPDIR"],  # the pod's own /tmp (volumes.py)
        }
        key_dir = ssh_key_dir(spec, view)
        return [sys.executable, "-I", str(STANDIN_SCRIPT), "sshd", "--socket", sshd_socket(meta["uid"]),
                "--hostname", self.pod["spec"].get("hostname") or meta["name"],
                "--authorized-keys", str(Path(key_dir) / "authorized_keys") if key_dir else "",
                *(arg for k, v in session_env.items() for arg in ("--env", f"{k}={v}")), "--", *view.argv[1:]]


def chooses_interfaces(family: str, view: ContainerView) -> bool:
    """The pod picks the family's interfaces itself (`--mca btl_tcp_if_exclude ...` or the env):
    adding an include beside its exclude would be an error to OpenMPI."""
    setting = f"{family}_if_"
    return any(setting in arg for arg in view.argv) or any(f"OMPI_MCA_{setting}" in name for name in view.env)


def ssh_key_dir(spec: dict[str, Any], view: ContainerView) -> str:
    """The local folder of the container's ssh keys (mpi-operator mounts them at sshAuthMountPath,
    `/root/.ssh` by default): the mount whose path ends in `/.ssh`; '' without one."""
    for mount in spec.get("volumeMounts") or []:
        if mount["mountPath"].rstrip("/").endswith("/.ssh"):
            return view.paths.local(mount["mountPath"]) or ""
    return ""
