"""The processes of the local cluster, in start order: their command lines and health checks."""

from __future__ import annotations

import os
import ssl
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.base.settings import LOOPBACK, REPO_DIR, Settings
from localcluster.control.pki import Pki
from localcluster.control.training_controllers import TRAINER, TRAINING_CONTROLLERS, TrainingController

# Label that kwok manages nodes by; the nodes this package creates carry it.
KWOK_NODE_LABEL = "type"
KWOK_NODE_LABEL_VALUE = "kwok"
MPI_OPERATOR_LOCK_NAMESPACE = "mpi-operator"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"


@dataclass(frozen=True)
class Component:
    """One process: how to start it and how to tell it is healthy."""

    name: str
    argv: list[str]
    health_url: str
    port: int | None
    env: dict[str, str] = field(default_factory=dict)
    # Files besides the executable whose change means the running process is stale (kwok's stages).
    code_files: list[Path] = field(default_factory=list)

    def kubeconfig_identity(self) -> str | None:
        """The client identity whose kubeconfig the component reads, if any."""
        return None if self.name == "etcd" else self.name


def kubeconfig_path(settings: Settings, identity: str) -> Path:
    return settings.state_dir / "kubeconfigs" / f"{identity}.kubeconfig"


def components(settings: Settings, pki: Pki, egress_config: Path | None = None) -> list[Component]:
    """Every component, in the order they must start (each needs the ones before it); with
    real nodes, `egress_config` routes the API server's traffic to nodes and pods (real_nodes/netd.py)."""
    c = ComponentCommands(settings, pki, egress_config)
    return [c.etcd(), c.kube_apiserver(), c.kube_controller_manager(), c.kube_scheduler(), c.kwok(),
            c.mpi_operator(), *(c.training_controller(t) for t in TRAINING_CONTROLLERS), c.elasticjob_operator(),
            c.node_agent()]


@dataclass(frozen=True)
class ComponentCommands:
    """Each component's command line and health check, from the settings and the PKI."""

    settings: Settings
    pki: Pki
    egress_config: Path | None = None

    @property
    def ports(self) -> dict[str, int]:
        return self.settings.ports

    @property
    def serving(self) -> list[str]:
        return [f"--tls-cert-file={self.pki.serving_cert}", f"--tls-private-key-file={self.pki.serving_key}"]

    def binary(self, name: str) -> str:
        return str(self.settings.bin_dir / name)

    def kubeconfig(self, identity: str) -> str:
        return str(kubeconfig_path(self.settings, identity))

    def https_health(self, name: str, path: str = "/healthz") -> tuple[str, int]:
        return f"https://{LOOPBACK}:{self.ports[name]}{path}", self.ports[name]

    def delegated_auth(self, identity: str) -> list[str]:
        """The controller manager's and scheduler's own servers authenticate their callers through
        the API server; /healthz stays open to anyone (their default always-allow paths)."""
        return [
            f"--kubeconfig={self.kubeconfig(identity)}",
            f"--authentication-kubeconfig={self.kubeconfig(identity)}",
            f"--authorization-kubeconfig={self.kubeconfig(identity)}",
            f"--client-ca-file={self.pki.ca_cert}",
            f"--bind-address={LOOPBACK}",
            "--leader-elect=false",
            *self.serving,
        ]

    def etcd(self) -> Component:
        url = f"http://{LOOPBACK}:{self.ports['etcd']}"
        peer_url = f"http://{LOOPBACK}:{self.ports['etcd-peer']}"
        return Component("etcd", [
            self.binary("etcd"),
            "--name=kubetest2-training",
            f"--data-dir={self.settings.state_dir / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=kubetest2-training={peer_url}",
            # A throw-away test cluster: durability is not worth an fsync per write.
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=2147483648",
        ], f"{url}/health", self.ports["etcd"])

    def kube_apiserver(self) -> Component:
        pki = self.pki
        return Component("kube-apiserver", [
            self.binary("kube-apiserver"),
            f"--etcd-servers=http://{LOOPBACK}:{self.ports['etcd']}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.ports['kube-apiserver']}",
            *self.serving,
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # pods/log is proxied to kwok, which serves with our CA's certificate on 127.0.0.1.
            f"--kubelet-client-certificate={pki.client_cert('kube-apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.client_key('kube-apiserver-kubelet-client')}",
            f"--kubelet-certificate-authority={pki.ca_cert}",
            "--kubelet-preferred-address-types=InternalIP",
            # The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints reject.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            *([f"--egress-selector-config-file={self.egress_config}"] if self.egress_config else []),
        ], *self.https_health("kube-apiserver", "/readyz"),
            code_files=[self.egress_config] if self.egress_config else [])

    def kube_controller_manager(self) -> Component:
        return self.delegating_server(
            "kube-controller-manager",
            # The service-account and token controllers: the `default` ServiceAccount of every
            # namespace, and kube-root-ca.crt for projected token volumes.
            f"--root-ca-file={self.pki.ca_cert}",
            f"--service-account-private-key-file={self.pki.service_account_key}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allocate-node-cidrs=false",
            # Its default, /usr/libexec/kubernetes/..., would be created on the machine.
            f"--flex-volume-plugin-dir={self.settings.state_dir / 'flex-volume'}",
        )

    def kube_scheduler(self) -> Component:
        return self.delegating_server("kube-scheduler")

    def delegating_server(self, name: str, *flags: str) -> Component:
        """The controller manager or the scheduler: its own flags among the shared ones."""
        return Component(name, [self.binary(name), *self.delegated_auth(name), f"--secure-port={self.ports[name]}",
                                *flags, "--profiling=false"], *self.https_health(name))

    def kwok(self) -> Component:
        return Component("kwok", [
            self.binary("kwok"),
            f"--kubeconfig={self.kubeconfig('kwok')}",
            f"--config={self.settings.stages_file}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={KWOK_NODE_LABEL}={KWOK_NODE_LABEL_VALUE}",
            f"--node-ip={LOOPBACK}",
            f"--node-port={self.ports['kwok']}",
            f"--server-address={LOOPBACK}:{self.ports['kwok']}",
            *self.serving,
            "--node-lease-duration-seconds=40",
            f"--cidr={POD_CIDR}",
            # Logs objects come from the API (the node agent makes one per pod), not from --config.
            "--enable-crds=Logs",
        ], *self.https_health("kwok"), code_files=[self.settings.stages_file])

    def mpi_operator(self) -> Component:
        """Supervised: mpi-operator exits whenever it loses its leader lease (see supervisor.py)."""
        port = self.ports["mpi-operator"]
        return Component("mpi-operator", [
            sys.executable, "-m", "localcluster.control.supervisor", "--",
            self.binary("mpi-operator"),
            f"--kubeConfig={self.kubeconfig('mpi-operator')}",
            f"--lock-namespace={MPI_OPERATOR_LOCK_NAMESPACE}",
            "--monitoring-port=0",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            # Its work queue charges a token for every event of every worker pod (10 a second, 100
            # in a burst by default): a 1,000-worker MPIJob's launcher then started minutes after
            # the last worker was ready (bench/scale.py). Large deployments raise these too.
            "--controller-queue-rate-limit=1000",
            "--controller-queue-burst=10000",
        ], f"http://{LOOPBACK}:{port}/healthz", port,
            # Read by the loopback patch that hack/build-binaries.sh compiles in.
            env={"MPI_OPERATOR_HEALTH_ADDRESS": f"{LOOPBACK}:{port}", "PYTHONPATH": str(REPO_DIR)})

    def training_controller(self, controller: TrainingController) -> Component:
        """Trainer's controller manager or the JobSet controller (training_controllers.py), supervised
        as the kubelet would restart it; healthy once /readyz says its webhook server serves."""
        settings = self.settings
        env = {"PYTHONPATH": str(REPO_DIR)}
        if controller is TRAINER:
            # Its webhook server reads $TMPDIR/k8s-webhook-server/serving-certs (no certDir setting).
            env["TMPDIR"] = str(controller.folder(settings))
        return Component(controller.name, [
            sys.executable, "-m", "localcluster.control.supervisor", "--",
            self.binary(controller.name),
            f"--kubeconfig={self.kubeconfig(controller.name)}",
            f"--config={controller.config_file(settings)}",
            "--zap-log-level=2",  # as upstream's Deployments
        ], f"http://{controller.address(settings, 'health')}/readyz", controller.port(settings, "health"),
            env=env, code_files=[controller.config_file(settings)])

    def elasticjob_operator(self) -> Component:
        """DLRover's ElasticJob operator (hack/build-binaries.sh: `elasticjob`, unpatched), supervised
        as the kubelet would restart it. Its flags put both listeners on loopback; leader election
        stays off (its default: one instance). It makes each ElasticJob's master pod in the image
        the job's master replica spec names (the harness names TRAINING_IMAGE, which has the
        `dlrover` package); a job that names none gets DLRover's --master-image default, an image of
        DLRover's registry, which the local cluster's nodes cannot pull."""
        health, metrics = self.ports["elasticjob-operator-health"], self.ports["elasticjob-operator-metrics"]
        return Component("elasticjob-operator", [
            sys.executable, "-m", "localcluster.control.supervisor", "--",
            self.binary("elasticjob"),
            f"--kubeconfig={self.kubeconfig('elasticjob-operator')}",
            f"--health-probe-bind-address={LOOPBACK}:{health}",
            f"--metrics-bind-address={LOOPBACK}:{metrics}",
        ], f"http://{LOOPBACK}:{health}/healthz", health, env={"PYTHONPATH": str(REPO_DIR)})

    def node_agent(self) -> Component:
        settings = self.settings
        return Component("node-agent", [
            sys.executable, "-m", "localcluster.node_agent",
            f"--server={settings.apiserver_url}",
            f"--state-dir={settings.state_dir}",
            f"--canned-logs-dir={settings.canned_logs_dir}",
            f"--default-canned-log={settings.default_canned_log}",
        ], "", None, env={"PYTHONPATH": str(REPO_DIR)})


def is_healthy(component: Component, pki: Pki) -> bool:
    """GETs the component's health URL (verified against our CA); no URL: alive is healthy."""
    if not component.health_url:
        return True
    context = None
    if component.health_url.startswith("https://"):
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.client_cert("admin")), str(pki.client_key("admin")))
    try:
        with urllib.request.urlopen(component.health_url, context=context, timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def process_env(component: Component) -> dict[str, str]:
    """The component's environment: ours plus its own, without proxies (all traffic is loopback)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = f"{LOOPBACK},localhost"
    env.update(component.env)
    return env
