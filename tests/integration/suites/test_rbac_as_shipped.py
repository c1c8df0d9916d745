"""manifests/rbac.yaml and rbac-addons.yaml as a user applies them (docs/RBAC.md): `kubectl apply -f`
of the files as shipped, nothing rendered; then every row of docs/RBAC.md's table is asked of the
API server for the ServiceAccount they make in `default`: `kubectl auth can-i` (RBAC), and for the
creates and deletes a server-side dry run (RBAC and the admission policy), first with rbac.yaml
alone, then with both. The harness's own tests apply them through
harness.cluster.manifests.rbac_objects (tests/integration/kubetest2_runs.py)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import LocalCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "manifests" / "rbac.yaml"
RBAC_ADDONS = REPO / "manifests" / "rbac-addons.yaml"
TABLE_DOC = REPO / "docs" / "RBAC.md"
ACCOUNT = "system:serviceaccount:default:kubetest2-training"
OWN_LABEL = {"app.kubernetes.io/managed-by": "kubetest2-training"}
# The policy's refusal (manifests/rbac.yaml, ValidatingAdmissionPolicy's messageExpression).
POLICY_REFUSAL = "kubetest2-training changes objects only in the namespaces the suites made"


def table_rows() -> list[tuple[str, str, str]]:
    """(request, with rbac.yaml, with both files) for each row of docs/RBAC.md's table."""
    text = TABLE_DOC.read_text()
    block = text.split("<!-- rbac-table:", 1)[1].split("<!-- end rbac-table -->", 1)[0]
    rows = []
    for line in block.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), cells[1], cells[2]))
    return rows


def can_i(cluster: LocalCluster, request: list[str]) -> str:
    done = subprocess.run(["kubectl", f"--kubeconfig={cluster.kubeconfig}", "auth", "can-i", *request,
                           f"--as={ACCOUNT}"], capture_output=True, text=True, check=False, timeout=60)
    return done.stdout.strip()


def sample(kind: str, namespace: str) -> dict | None:
    """A minimal object of `kind` (a row's resource) to create in a dry run; None: not dry-run."""
    meta = {"name": f"rbac-probe-{uuid.uuid4().hex[:6]}", "namespace": namespace, "labels": OWN_LABEL}
    pod = {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}
    selector = {"matchLabels": {"probe": "rbac"}}
    template = {"metadata": {"labels": {"probe": "rbac"}},
                "spec": {**pod, "restartPolicy": "Always", "nodeSelector": {"kt2t-rbac-probe": "none"}}}
    return {
        "namespaces": {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": meta["name"], "labels": OWN_LABEL}},
        "jobs": {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"spec": pod}}},
        "daemonsets": {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
                       "spec": {"selector": selector, "template": template}},
        "services": {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": [{"port": 80}]}},
        "configmaps": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}},
        "pods": {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod},
    }.get(kind)


def dry_run(cluster: LocalCluster, args: list[str], manifest: dict | None = None) -> tuple[bool, str]:
    """(admitted, stderr) of a server-side dry run as the ServiceAccount."""
    done = subprocess.run(["kubectl", f"--kubeconfig={cluster.kubeconfig}", *args, "--dry-run=server",
                           f"--as={ACCOUNT}"], capture_output=True, text=True, check=False, timeout=60,
                          input=json.dumps(manifest) if manifest else None)
    return done.returncode == 0, done.stderr


@pytest.fixture
def namespaces(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """<own>: a namespace labelled as the suites label theirs; <other>: one they did not make."""
    suffix = uuid.uuid4().hex[:6]
    made = {"<own>": f"kt2t-rbac-own-{suffix}", "<other>": f"kt2t-rbac-other-{suffix}"}
    cluster.kubectl("create", "namespace", made["<own>"])
    cluster.kubectl("label", "namespace", made["<own>"], "app.kubernetes.io/managed-by=kubetest2-training")
    cluster.kubectl("create", "namespace", made["<other>"])
    try:
        yield made
    finally:
        for name in made.values():
            cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def kube_system_daemonset(cluster: LocalCluster) -> Iterator[str]:
    """A DaemonSet in kube-system (on no node) for the rows that delete one."""
    manifest = sample("daemonsets", "kube-system")
    assert manifest is not None
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(manifest))
    try:
        yield manifest["metadata"]["name"]
    finally:
        cluster.kubectl("delete", "daemonset", "-n", "kube-system", manifest["metadata"]["name"], "--wait=false")


def check_row(cluster: LocalCluster, request: str, expected: str, namespaces: dict[str, str],
              daemonset: str) -> list[str]:
    """What differs between `expected` and what the API server says of `request`."""
    words = [namespaces.get(w, w) for w in re.sub(r"/(<\w+>)", r" \1", request).split()]
    verb, resource = words[0], words[1]
    target = None
    if resource == "namespaces" and len(words) > 2 and not words[2].startswith("-"):
        target, words = words[2], [verb, f"namespaces/{words[2]}", *words[3:]]
    wrong = []
    answer = can_i(cluster, words)
    if answer != ("no" if expected == "no" else "yes"):
        wrong.append(f"{request}: kubectl auth can-i says {answer!r}, the table {expected!r}")
    namespace = words[words.index("-n") + 1] if "-n" in words else None
    plural = resource.split(".")[0]
    if verb == "create" and (manifest := sample(plural, namespace or "")) is not None:
        if plural == "namespaces":
            manifest["metadata"].pop("namespace", None)
        admitted, stderr = dry_run(cluster, ["create", "-f", "-"], manifest)
    elif verb == "delete" and target is not None:
        admitted, stderr = dry_run(cluster, ["delete", "namespace", target])
    elif verb == "delete" and plural == "daemonsets" and namespace == "kube-system":
        admitted, stderr = dry_run(cluster, ["delete", "daemonset", "-n", namespace, daemonset])
    else:
        return wrong
    if admitted != (expected == "yes"):
        outcome = "admitted" if admitted else "refused"
        wrong.append(f"{request}: a server-side dry run was {outcome} ({stderr.strip()}), the table says {expected!r}")
    elif expected == "no (admission)" and POLICY_REFUSAL not in stderr:
        wrong.append(f"{request}: refused, but not by the admission policy: {stderr.strip()}")
    return wrong


def test_the_table_has_both_kinds_of_rows():
    rows = table_rows()
    assert len(rows) >= 25, rows
    assert {expected for _, alone, both in rows for expected in (alone, both)} == {"yes", "no", "no (admission)"}
    assert any(alone != both for _, alone, both in rows), "rbac-addons.yaml changes no row"


def test_every_row_of_the_table_is_what_the_api_server_says(cluster: LocalCluster, namespaces: dict[str, str],
                                                            kube_system_daemonset: str):
    # Another test's fixture applies the same cluster-scoped objects (rbac_objects) and deletes them
    # after: this test leaves the cluster as it found it too.
    existed = cluster.kubectl("get", "clusterrole", "--ignore-not-found", "-o", "name", "kubetest2-training").strip()
    applied = cluster.kubectl("apply", "-f", str(RBAC))
    try:
        for made in ("serviceaccount/kubetest2-training", "clusterrole.rbac.authorization.k8s.io/kubetest2-training",
                     "clusterrolebinding.rbac.authorization.k8s.io/kubetest2-training",
                     "validatingadmissionpolicy.admissionregistration.k8s.io/kubetest2-training-own-namespaces",
                     "validatingadmissionpolicybinding.admissionregistration.k8s.io/kubetest2-training-own-namespaces"):
            assert made in applied, applied
        # Applying again creates nothing (a CI job may apply it before every run); the policy reads as
        # `configured` each time (kubectl's client-side diff of a server-normalized field).
        again = cluster.kubectl("apply", "-f", str(RBAC))
        assert again.count("unchanged") >= 4 and "created" not in again, again
        wait_for_policy(cluster, namespaces)
        rows = table_rows()
        wrong = [w for request, alone, _ in rows
                 for w in check_row(cluster, request, alone, namespaces, kube_system_daemonset)]
        assert not wrong, "rbac.yaml alone:\n" + "\n".join(wrong)
        cluster.kubectl("apply", "-f", str(RBAC_ADDONS))
        try:
            wrong = [w for request, _, both in rows
                     for w in check_row(cluster, request, both, namespaces, kube_system_daemonset)]
            assert not wrong, "rbac.yaml + rbac-addons.yaml:\n" + "\n".join(wrong)
        finally:
            cluster.kubectl("delete", "-f", str(RBAC_ADDONS), "--wait=true")
    finally:
        if not existed:
            cluster.kubectl("delete", "-f", str(RBAC), "--wait=true")


def wait_for_policy(cluster: LocalCluster, namespaces: dict[str, str], seconds: float = 30.0) -> None:
    """The API server enforces a new policy after its informer sees it (about a second)."""
    import time

    deadline = time.monotonic() + seconds
    manifest = sample("jobs", namespaces["<other>"])
    while True:
        admitted, stderr = dry_run(cluster, ["create", "-f", "-"], manifest)
        if not admitted and POLICY_REFUSAL in stderr:
            return
        assert time.monotonic() < deadline, f"the admission policy is not enforced after {seconds:.0f}s: {stderr}"
        time.sleep(0.5)
