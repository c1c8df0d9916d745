"""Settings of the local cluster: where its state lives, its ports, its nodes (the only env reader)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# This file is localcluster/base/settings.py; hack/ holds the binaries' build script and kwok's stages.
REPO_DIR = Path(__file__).resolve().parents[2]
HACK_DIR = REPO_DIR / "hack"
LOOPBACK = "127.0.0.1"

# Fixed, non-default ports so the local cluster never collides with a real kubelet or control
# plane on the same machine; each one is overridable by its env variable.
DEFAULT_PORTS: dict[str, int] = {
    "etcd": 23790,
    "etcd-peer": 23800,
    "kube-apiserver": 26443,
    "kube-controller-manager": 20257,
    "kube-scheduler": 20259,
    "kwok": 20250,
    "mpi-operator": 20280,
    # Kubeflow Trainer's controller manager and the JobSet controller: health, webhook, metrics.
    "trainer-health": 20290,
    "trainer-webhook": 20291,
    "trainer-metrics": 20292,
    "jobset-health": 20293,
    "jobset-webhook": 20294,
    "jobset-metrics": 20295,
    # DLRover's ElasticJob operator: its health probes and metrics (both every interface by default).
    "elasticjob-operator-health": 20296,
    "elasticjob-operator-metrics": 20297,
    # The real nodes' image registry (localcluster/realnodes/registry.py), on 127.0.0.1 like the rest;
    # the nodes reach it through netd. Its last two digits are no other port's: a cluster at another
    # KT2T_PORT_OFFSET (a multiple of 100) never lands on it.
    "registry": 25010,
}


class InFolder:
    """A read-only attribute: a fixed name inside the folder another attribute holds."""

    def __init__(self, folder_attribute: str, name: str) -> None:
        self.folder_attribute, self.name = folder_attribute, name

    def __get__(self, instance: object, owner: type | None = None) -> Path:
        return Path(getattr(instance, self.folder_attribute)) / self.name


def _port_env_name(component: str) -> str:
    return "KT2T_PORT_" + component.upper().replace("-", "_")


@dataclass(frozen=True)
class Settings:
    """Everything `hack/local-cluster` needs to know, resolved once from the environment."""

    state_dir: Path
    bin_dir: Path
    ports: dict[str, int]
    node_shape: str
    node_count: int
    node_efa: int
    default_canned_log: str
    wait_timeout_s: float
    # Real nodes (kubelet + containerd) beside the kwok nodes; None: as many as the state records.
    real_nodes: int | None = None
    canned_logs_dir: Path = field(default=REPO_DIR / "localcluster" / "emulation" / "canned_logs")
    stages_file: Path = field(default=REPO_DIR / "localcluster" / "emulation" / "kwok_stages.yaml")
    build_script: Path = field(default=HACK_DIR / "build-binaries.sh")

    # The state folder's parts: PKI; pid files and the command line each pid was started with;
    # one log per component; container logs in CRI format (kwok serves them through `pods/log`);
    # the admin kubeconfig that `up` prints.
    pki_dir = InFolder("state_dir", "pki")
    run_dir = InFolder("state_dir", "run")
    logs_dir = InFolder("state_dir", "logs")
    pod_logs_dir = InFolder("state_dir", "pod-logs")
    kubeconfig = InFolder("state_dir", "kubeconfig")

    @property
    def apiserver_url(self) -> str:
        return f"https://{LOOPBACK}:{self.ports['kube-apiserver']}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        home = Path(env.get("HOME", str(Path.home())))
        state_home = Path(env.get("XDG_STATE_HOME") or home / ".local" / "state")
        cache_home = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
        cache_dir = Path(env.get("KT2T_CACHE") or cache_home / "kubetest2-training")
        # KT2T_PORT_OFFSET moves every default port at once: a second cluster (own KT2T_STATE) on
        # the same machine, e.g. a private one per test session.
        offset = _int_env(env, "KT2T_PORT_OFFSET", 0)
        ports = {name: _int_env(env, _port_env_name(name), port + offset) for name, port in DEFAULT_PORTS.items()}
        return cls(
            state_dir=Path(env.get("KT2T_STATE") or state_home / "kubetest2-training" / "cluster").absolute(),
            bin_dir=cache_dir / "bin",
            ports=ports,
            node_shape=env.get("KT2T_NODE_SHAPE", "cpu"),
            node_count=_int_env(env, "KT2T_NODE_COUNT", 2),
            node_efa=_int_env(env, "KT2T_NODE_EFA", 0),
            default_canned_log=env.get("KT2T_DEFAULT_CANNED_LOG", "bert-mpirun-32ranks"),
            wait_timeout_s=float(_int_env(env, "KT2T_WAIT_TIMEOUT", 120)),
            real_nodes=_int_env(env, "KT2T_REAL_NODES", -1) if env.get("KT2T_REAL_NODES") else None,
        )


def _int_env(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"local-cluster: {name}={raw!r} is not an integer") from None


def port_env_names() -> dict[str, str]:
    """Env variable overriding each component's port (for usage text and the README)."""
    return {name: _port_env_name(name) for name in DEFAULT_PORTS}
