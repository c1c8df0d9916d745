"""The local cluster's Kubeflow Trainer and JobSet controllers (localcluster/control/training_controllers.py):
their config files keep every listener on 127.0.0.1 with certificates from outside, and their webhook
configurations are the pinned add-on manifests' webhooks sent to 127.0.0.1 with the cluster CA."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from localcluster.base.settings import Settings
from localcluster.control.pki import Pki
from localcluster.control.training_controllers import JOBSET, TRAINER, TRAINING_CONTROLLERS, TrainingController


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"HOME": str(tmp_path), "KT2T_STATE": str(tmp_path / "state"),
                              "KT2T_PORT_OFFSET": "3000"})


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """Stand-in certificate files (their content is copied, not parsed)."""
    pki = Pki(tmp_path / "pki")
    pki.directory.mkdir()
    for path, text in ((pki.ca_cert, "CA"), (pki.serving_cert, "CERT"), (pki.serving_key, "KEY")):
        path.write_text(text)
    return pki


def addresses(config: dict) -> list[str]:
    return [config["health"]["healthProbeBindAddress"], config["metrics"]["bindAddress"],
            f"{config['webhook']['host']}:{config['webhook']['port']}"]


def test_every_listener_is_on_loopback_at_the_offset_ports(settings: Settings):
    seen = []
    for controller in TRAINING_CONTROLLERS:
        config = controller.config(settings)
        assert all(a.startswith("127.0.0.1:") for a in addresses(config)), config
        seen += addresses(config)
        assert config["leaderElection"] == {"leaderElect": False}
    assert len(set(seen)) == 6
    assert "127.0.0.1:23290" in seen  # trainer-health 20290 + offset 3000


def test_certificates_come_from_outside(settings: Settings, pki: Pki):
    assert TRAINER.config(settings)["certManagement"] == {"enable": False}
    assert JOBSET.config(settings)["internalCertManagement"] == {"enable": False}
    assert JOBSET.config(settings)["webhook"]["certDir"] == str(JOBSET.cert_dir(settings))
    for controller in TRAINING_CONTROLLERS:
        controller.write_files(settings, pki)
        assert (controller.cert_dir(settings) / "tls.crt").read_text() == "CERT"
        assert (controller.cert_dir(settings) / "tls.key").stat().st_mode & 0o077 == 0
        assert yaml.safe_load(controller.config_file(settings).read_text()) == controller.config(settings)


def test_webhooks_of_the_pinned_manifests_go_to_loopback_with_the_cluster_ca(settings: Settings, pki: Pki):
    ca = base64.b64encode(b"CA").decode()
    trainer = TRAINER.webhook_configurations(settings, pki)
    assert [c["metadata"]["name"] for c in trainer] == ["validator.trainer.kubeflow.org"]
    urls = {w["name"]: w["clientConfig"] for w in trainer[0]["webhooks"]}
    assert urls["validator.trainjob.trainer.kubeflow.org"] == {
        "url": "https://127.0.0.1:23291/validate-trainer-kubeflow-org-v1alpha1-trainjob", "caBundle": ca}
    jobset = JOBSET.webhook_configurations(settings, pki)
    assert sorted(c["kind"] for c in jobset) == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    pod_hooks = [w for c in jobset for w in c["webhooks"] if w["name"] in ("mpod.kb.io", "vpod.kb.io")]
    # Only JobSet's pods go through its pod webhooks (a down controller blocks no other pod).
    assert len(pod_hooks) == 2 and all(w["objectSelector"]["matchExpressions"][0]["key"] ==
                                       "jobset.sigs.k8s.io/jobset-name" for w in pod_hooks)
    assert all(w["clientConfig"]["url"].startswith("https://127.0.0.1:23294/") for c in jobset for w in c["webhooks"])


def test_a_manifest_without_webhooks_is_named(settings: Settings, pki: Pki, tmp_path: Path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: Namespace\n")
    with pytest.raises(ValueError, match=r"empty.yaml: no MutatingWebhookConfiguration or Validating.*render-trainer"):
        TrainingController("x", "trainer", empty).webhook_configurations(settings, pki)
