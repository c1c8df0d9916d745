"""Kubeflow Trainer's controller manager and the JobSet controller, run out of cluster like mpi-operator:
their config files, webhook serving certificates and webhook configurations.

Both are upstream binaries, unpatched (hack/build-binaries.sh): every listen address comes from
their config file (health, metrics, webhook on 127.0.0.1, ports by KT2T_PORT_OFFSET), leader
election is off (one instance), and their own certificate management is off: they serve the
cluster's serving certificate (pki.py: IP 127.0.0.1, signed by the cluster CA), and the webhook
configurations `up` applies name `https://127.0.0.1:PORT/<path>` with that CA. The webhooks
themselves (names, paths, rules, failure policies) are read from the pinned add-on manifests
(manifests/addons/trainer.yaml, jobset.yaml), so the local cluster admits exactly what an
in-cluster install would; only their clientConfig differs.
"""

from __future__ import annotations

import base64
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.base.settings import LOOPBACK, REPO_DIR, Settings
from localcluster.control.pki import Pki

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class TrainingController:
    """One controller: its component name, config, ports and where its webhooks come from."""

    name: str  # component name, binary name and client identity
    port_prefix: str  # its ports are <prefix>-health, <prefix>-webhook, <prefix>-metrics
    addon_manifest: Path

    def folder(self, settings: Settings) -> Path:
        """Its config file and certificates: <state>/<name>/."""
        return settings.state_dir / self.name

    def config_file(self, settings: Settings) -> Path:
        return self.folder(settings) / "config.yaml"

    def cert_dir(self, settings: Settings) -> Path:
        """tls.crt and tls.key: where controller-runtime's webhook server looks when TMPDIR is the
        folder (trainer's config has no certDir; JobSet's names this folder)."""
        return self.folder(settings) / "k8s-webhook-server" / "serving-certs"

    def port(self, settings: Settings, role: str) -> int:
        return settings.ports[f"{self.port_prefix}-{role}"]

    def address(self, settings: Settings, role: str) -> str:
        return f"{LOOPBACK}:{self.port(settings, role)}"

    def config(self, settings: Settings) -> dict[str, Any]:
        """The controller's Configuration object (its own API group)."""
        health = {"healthProbeBindAddress": self.address(settings, "health")}
        webhook: dict[str, Any] = {"host": LOOPBACK, "port": self.port(settings, "webhook")}
        if self.name == TRAINER.name:
            return {
                "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                "kind": "Configuration",
                "health": health,
                # Plain HTTP: its secure serving would want a certificate of its own.
                "metrics": {"bindAddress": self.address(settings, "metrics"), "secureServing": False},
                "webhook": webhook,
                "leaderElection": {"leaderElect": False},
                # As upstream's controller_manager_config.yaml.
                "controller": {"groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": 5,
                                                        "TrainingRuntime.trainer.kubeflow.org": 1,
                                                        "ClusterTrainingRuntime.trainer.kubeflow.org": 1}},
                # The certificates come from outside: it neither makes a Secret nor patches the
                # webhook configuration's caBundle.
                "certManagement": {"enable": False},
            }
        return {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "health": health,
            # JobSet always serves metrics over TLS (authenticated through the API server).
            "metrics": {"bindAddress": self.address(settings, "metrics"), "certDir": str(self.cert_dir(settings))},
            "webhook": {**webhook, "certDir": str(self.cert_dir(settings))},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }

    def write_files(self, settings: Settings, pki: Pki) -> None:
        """The config file and the serving certificate the controller reads at start."""
        cert_dir = self.cert_dir(settings)
        cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(pki.serving_cert, cert_dir / "tls.crt")
        shutil.copyfile(pki.serving_key, cert_dir / "tls.key")
        (cert_dir / "tls.key").chmod(0o600)
        text = yaml.safe_dump(self.config(settings), sort_keys=False)
        config_file = self.config_file(settings)
        if not config_file.is_file() or config_file.read_text() != text:
            config_file.write_text(text)

    def webhook_configurations(self, settings: Settings, pki: Pki) -> list[dict[str, Any]]:
        """The add-on manifest's webhook configurations, each webhook sent to 127.0.0.1 with our CA."""
        ca_bundle = base64.b64encode(pki.ca_cert.read_bytes()).decode()
        base_url = f"https://{self.address(settings, 'webhook')}"
        found = []
        # Only the webhook documents are parsed: the whole manifest (CRDs: ~1 MB) took pure-Python
        # PyYAML tens of seconds on a loaded machine, on every `up`.
        for text in re.split(r"^---$", self.addon_manifest.read_text(), flags=re.MULTILINE):
            if not re.search(rf"^kind: ({'|'.join(WEBHOOK_KINDS)})$", text, flags=re.MULTILINE):
                continue
            document = yaml.safe_load(text)
            for webhook in document["webhooks"]:
                path = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            found.append(document)
        if not found:
            raise ValueError(f"{self.addon_manifest}: no {' or '.join(WEBHOOK_KINDS)}; "
                             "regenerate it with hack/render-trainer-manifests.sh")
        return found


ADDONS_DIR = REPO_DIR / "manifests" / "addons"
TRAINER = TrainingController("trainer-controller-manager", "trainer", ADDONS_DIR / "trainer.yaml")
JOBSET = TrainingController("jobset-controller-manager", "jobset", ADDONS_DIR / "jobset.yaml")
TRAINING_CONTROLLERS = (JOBSET, TRAINER)
