"""The harness connects with the pod's ServiceAccount when no kubeconfig is given or found, as
upstream's binaries do inside the kubetest2 image; outside a pod it says what it looked for."""

from __future__ import annotations

import pytest
from kubernetes.config import incluster_config

from harness.cluster.client import Cluster
from harness.errors import ClusterError


@pytest.fixture
def no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


def test_in_a_pod_the_service_account_token_and_ca_are_used(no_kubeconfig, monkeypatch):
    token, ca = no_kubeconfig / "token", no_kubeconfig / "ca.crt"
    token.write_text("sa-token-1")
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cluster = Cluster.connect(None)
    configuration = cluster.api.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.ssl_ca_cert == str(ca)
    assert configuration.auth_settings()["BearerToken"]["value"] == "bearer sa-token-1"
    assert cluster.kubeconfig is None


def test_outside_a_pod_without_a_kubeconfig_the_error_says_what_was_looked_for(no_kubeconfig, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterError, match=r"no ~/.kube/config, and not in a pod with a ServiceAccount token"):
        Cluster.connect(None)


def test_a_kubeconfig_given_is_used_even_in_a_pod(no_kubeconfig, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(ClusterError, match=r"load kubeconfig .*missing"):
        Cluster.connect(str(no_kubeconfig / "missing"))


def test_the_kubeconfig_environment_variable_is_used_before_the_pods_service_account(no_kubeconfig, monkeypatch):
    """`python -m harness.cleanup` with KUBECONFIG set and no ~/.kube/config once went in-cluster
    and failed outside a pod (CI)."""
    kubeconfig = no_kubeconfig / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert Cluster.connect(None).api.configuration.host == "https://127.0.0.1:6443"
