"""manifests/rbac.yaml as a user applies it (README, "Run it against your own cluster"): `kubectl apply
-f` of the file as shipped, nothing rendered; the ServiceAccount it makes in `default` may then do
what the suites do and nothing the file does not grant. The harness's own tests apply it through
harness.cluster.manifests.rbac_objects (tests/integration/suites/test_reliability.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..conftest import LocalCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "manifests" / "rbac.yaml"
ACCOUNT = "system:serviceaccount:default:kubetest2-training"


def can_i(cluster: LocalCluster, verb: str, resource: str) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={cluster.kubeconfig}", "auth", "can-i", verb, resource,
                           f"--as={ACCOUNT}"], capture_output=True, text=True, check=False, timeout=60)
    return done.stdout.strip()


def test_kubectl_apply_takes_the_file_as_shipped(cluster: LocalCluster):
    # Another test's fixture applies the same cluster-scoped objects (rbac_objects) and deletes them
    # after: this test leaves the cluster as it found it too.
    existed = cluster.kubectl("get", "clusterrole", "--ignore-not-found", "-o", "name", "kubetest2-training").strip()
    applied = cluster.kubectl("apply", "-f", str(RBAC))
    try:
        for made in ("serviceaccount/kubetest2-training", "clusterrole.rbac.authorization.k8s.io/kubetest2-training",
                     "clusterrolebinding.rbac.authorization.k8s.io/kubetest2-training"):
            assert made in applied, applied
        assert cluster.kubectl("get", "serviceaccount", "-n", "default", "kubetest2-training", "-o", "name").strip() \
            == "serviceaccount/kubetest2-training"
        # The binding names the account the file made: it gets the suites' rights, and no others.
        assert can_i(cluster, "list", "nodes") == "yes"
        assert can_i(cluster, "create", "namespaces") == "yes"
        assert can_i(cluster, "get", "secrets") == "no"
        # Applying again changes nothing (a CI job may apply it before every run).
        again = cluster.kubectl("apply", "-f", str(RBAC))
        assert again.count("unchanged") == 3, again
    finally:
        if not existed:
            cluster.kubectl("delete", "-f", str(RBAC), "--wait=true")
