"""The cluster's PKI, made with the openssl CLI: a CA, serving and client certificates, SA keys."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from localcluster.base.layout import GATEWAY_IP
from localcluster.base.settings import LOOPBACK, InFolder

# One serving certificate for every component: all of them listen on 127.0.0.1 only. The
# kubernetes.default names let in-cluster clients of a later version verify the API server.
SERVING_SANS = (
    f"IP:{LOOPBACK}",
    "DNS:localhost",
    "IP:10.96.0.1",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
    # The API forwarder inside the real nodes' network (real_nodes/netd.py): the `kubernetes`
    # Service's endpoint, which kubelets, kube-proxy and CoreDNS use.
    f"IP:{GATEWAY_IP}",
)


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's subject: CN is the user, O the groups RBAC sees."""

    name: str
    common_name: str
    organization: str = ""


# kwok, mpi-operator and the node agent run in system:masters: kwok stands in for the kubelets
# of every fake node at once (the Node authorizer grants a kubelet its own node only), and the
# other two are test infrastructure whose RBAC is not what this project tests.
CLIENT_IDENTITIES = (
    ClientIdentity("admin", "kubetest2-training-admin", "system:masters"),
    ClientIdentity("kube-controller-manager", "system:kube-controller-manager"),
    ClientIdentity("kube-scheduler", "system:kube-scheduler"),
    ClientIdentity("kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
    ClientIdentity("kwok", "kubetest2-training-kwok", "system:masters"),
    ClientIdentity("mpi-operator", "kubetest2-training-mpi-operator", "system:masters"),
    ClientIdentity("node-agent", "kubetest2-training-node-agent", "system:masters"),
    # Kubeflow Trainer and JobSet: upstream's ClusterRoles are the add-on's (manifests/addons), not
    # what the local cluster tests.
    ClientIdentity("trainer-controller-manager", "kubetest2-training-trainer-controller-manager", "system:masters"),
    ClientIdentity("jobset-controller-manager", "kubetest2-training-jobset-controller-manager", "system:masters"),
    # DLRover's ElasticJob operator: its ClusterRole is DLRover's deployment's, not tested here.
    ClientIdentity("elasticjob-operator", "kubetest2-training-elasticjob-operator", "system:masters"),
)


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files."""

    directory: Path

    ca_cert = InFolder("directory", "ca.crt")
    ca_key = InFolder("directory", "ca.key")
    serving_cert = InFolder("directory", "serving.crt")
    serving_key = InFolder("directory", "serving.key")
    service_account_key = InFolder("directory", "sa.key")
    service_account_public_key = InFolder("directory", "sa.pub")

    def client_cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def client_key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    def sign_client(self, name: str, common_name: str, organization: str = "") -> None:
        """A client certificate `name` (for write_kubeconfig), unless it exists."""
        if not self.client_cert(name).is_file():
            subject = (f"/O={organization}" if organization else "") + f"/CN={common_name}"
            self._sign(name, subject, "clientAuth", self.client_cert(name), self.client_key(name))
            self.client_key(name).chmod(0o600)

    def sign_serving(self, name: str, common_name: str, sans: tuple[str, ...]) -> None:
        """A serving certificate `name` (a real node's kubelet), unless it exists."""
        if not self.client_cert(name).is_file():
            self._sign(name, f"/CN={common_name}", "serverAuth", self.client_cert(name), self.client_key(name), sans)
            self.client_key(name).chmod(0o600)

    def serving_sans_current(self) -> bool:
        """Whether the serving certificate names every SAN of SERVING_SANS (a PKI made before a SAN
        was added lacks it)."""
        result = subprocess.run(["openssl", "x509", "-in", str(self.serving_cert), "-noout", "-ext", "subjectAltName"],
                                capture_output=True, text=True, check=False)
        named = {part.strip().replace("IP Address:", "IP:") for part in result.stdout.splitlines()[-1].split(",")} \
            if result.returncode == 0 and result.stdout.strip() else set()
        return set(SERVING_SANS) <= named

    def is_complete(self) -> bool:
        paths = [self.ca_cert, self.ca_key, self.serving_cert, self.serving_key,
                 self.service_account_key, self.service_account_public_key]
        paths += [self.client_cert(i.name) for i in CLIENT_IDENTITIES]
        return all(p.is_file() for p in paths)

    def generate(self) -> None:
        """Creates every file; keeps an existing complete PKI (certificates outlive restarts)."""
        if self.is_complete():
            if not self.serving_sans_current():
                # The API server reloads its serving certificate from the file.
                self._sign("serving", "/CN=kubetest2-training-serving", "serverAuth",
                           self.serving_cert, self.serving_key, sans=SERVING_SANS)
                self.serving_key.chmod(0o600)
            return
        if all(p.is_file() for p in (self.ca_cert, self.ca_key, self.serving_cert, self.serving_key,
                                       self.service_account_key, self.service_account_public_key)):
            # A cluster made before a client identity was added: sign only what is missing, so
            # the running components keep trusting the CA.
            self._sign_clients(i for i in CLIENT_IDENTITIES if not self.client_cert(i.name).is_file())
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _openssl("req", "-x509", "-new", "-nodes", *_EC_KEY, "-keyout", self.ca_key, "-out", self.ca_cert,
                 "-days", "3650", "-subj", "/CN=kubetest2-training-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
        self._sign("serving", "/CN=kubetest2-training-serving", "serverAuth",
                   self.serving_cert, self.serving_key, sans=SERVING_SANS)
        self._sign_clients(CLIENT_IDENTITIES)
        # RSA for the service-account token signer: every Kubernetes version accepts it.
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", self.service_account_key)
        _openssl("pkey", "-in", self.service_account_key, "-pubout", "-out", self.service_account_public_key)
        for key in self.directory.glob("*.key"):
            key.chmod(0o600)

    def _sign_clients(self, identities: Iterable[ClientIdentity]) -> None:
        for identity in identities:
            subject = (f"/O={identity.organization}" if identity.organization else "") + f"/CN={identity.common_name}"
            self._sign(identity.name, subject, "clientAuth",
                       self.client_cert(identity.name), self.client_key(identity.name))
            self.client_key(identity.name).chmod(0o600)

    def _sign(self, name: str, subject: str, usage: str, cert: Path, key: Path,
              sans: tuple[str, ...] = ()) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            csr = Path(tmp) / f"{name}.csr"
            extensions = Path(tmp) / "ext.cnf"
            lines = ["basicConstraints=critical,CA:FALSE",
                     "keyUsage=critical,digitalSignature,keyEncipherment",
                     f"extendedKeyUsage={usage}"]
            if sans:
                lines.append("subjectAltName=" + ",".join(sans))
            extensions.write_text("\n".join(lines) + "\n")
            _openssl("req", "-new", "-nodes", *_EC_KEY, "-keyout", key, "-out", csr, "-subj", subject)
            _openssl("x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key,
                     "-CAcreateserial", "-days", "365", "-out", cert, "-extfile", extensions)


# EC P-256 keys: generated in milliseconds, and accepted by every component.
_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def _openssl(*args: str | Path) -> None:
    result = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]}: {result.stderr.strip()}")
