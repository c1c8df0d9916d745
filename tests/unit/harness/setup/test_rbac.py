"""manifests/rbac.yaml grants every API call the harness makes (issue 23 item 5), and
manifests/rbac-addons.yaml what installing the add-ons needs in kube-system (issue 46): each call of the
cluster client (get, list, delete, apply) and each watch on a resource named in harness/ and
testbins/ is found in the source, with the objects applied from templates and add-ons, and checked
against the ClusterRole's rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.cluster import resources
from harness.cluster.manifests import RBAC_ADDONS, rbac_objects, render
from harness.cluster.resources import KNOWN_RESOURCES, POD, Resource
from harness.jobs.launchers import LAUNCHERS
from harness.setup.addons import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN, addon_objects
from testbins.nvidia_training.elastic import ELASTIC_LAUNCHERS

REPO = Path(__file__).resolve().parents[4]
# `<call>(<RESOURCE CONSTANT>` anywhere in the code: the client's own calls and the conditions,
# watches and deletions built on a resource.
CALL = re.compile(r"\b(?P<call>\w+)\(\s*(?P<name>[A-Z][A-Z_]+)\b")
CLIENT_VERBS = {"get": {"get"}, "list": {"list"}, "delete": {"delete"}, "apply": {"create", "patch"}}
# Anything else given a resource watches it (Watched, _reached, deleted: a list, then a watch).
WATCH_VERBS = {"list", "watch"}
# Kinds only the mpi-operator add-on's installation touches: not granted (see manifests/rbac.yaml).
MPI_OPERATOR_ONLY = {"CRD", "DEPLOYMENT"}
# What only nvidia-dra's set-up changes, where the cluster lacks it, and only with an administrator's
# rights (not granted: docs/RBAC.md's `create deviceclasses` row says no): the DeviceClass it removes after.
ADMIN_ONLY_CHANGES = {("DEVICE_CLASS", "delete")}


def group_of(resource: Resource) -> str:
    return resource.api_version.rpartition("/")[0] if "/" in resource.api_version else ""


def cluster_role(name: str) -> dict:
    objects = rbac_objects("ns", {"app.kubernetes.io/managed-by": "kubetest2-training"})
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == name]
    return role


def rules_of(role: dict) -> set[tuple[str, str, str]]:
    return {(group, name, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for name in rule["resources"] for verb in rule["verbs"]}


def granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the suites' ClusterRole grants."""
    return rules_of(cluster_role("kubetest2-training"))


def resource_constants() -> dict[str, Resource]:
    return {name: value for name, value in vars(resources).items() if isinstance(value, Resource)}


def calls_in_source() -> dict[tuple[str, str, str], list[str]]:
    """(group, resource, verb) -> where in harness/ and testbins/ it is used."""
    constants = resource_constants()
    used: dict[tuple[str, str, str], list[str]] = {}
    for path in [*(REPO / "harness").rglob("*.py"), *(REPO / "testbins").rglob("*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CALL.finditer(line):
                resource = constants.get(match["name"])
                if resource is None or match["name"] in MPI_OPERATOR_ONLY:
                    continue
                for verb in CLIENT_VERBS.get(match["call"], WATCH_VERBS):
                    if (match["name"], verb) in ADMIN_ONLY_CHANGES:
                        continue
                    used.setdefault((group_of(resource), resource.plural, verb), []).append(
                        f"{path.relative_to(REPO)}:{number}")
    return used


def applied_objects() -> list[dict]:
    """What the harness applies: every launcher's objects (rendered), the device plugins' objects."""
    from harness.jobs.workload import Workload
    from tests.unit.harness.jobs.test_tolerations import placement

    workload = Workload("job", "workloads.bert", host_paths={"/h": "/etc"})
    rendered = [obj for launcher in LAUNCHERS.values() for r in launcher.renderings(workload, placement())
                for obj in render(r.template, r.fields)]
    # TestElasticRecovery's workload under each elastic launcher: trainjob's brings a TrainingRuntime
    elastic = Workload("nanogpt-elastic", "workloads.nanogpt", elastic=True, max_restarts=3)
    rendered += [obj for name in ELASTIC_LAUNCHERS for r in LAUNCHERS[name].renderings(elastic, placement())
                 for obj in render(r.template, r.fields)]
    return rendered + addon_objects(NVIDIA_DEVICE_PLUGIN, "r") + addon_objects(EFA_DEVICE_PLUGIN, "r")


def test_the_elastic_trainjob_is_among_the_applied_objects():
    kinds = {obj["kind"] for obj in applied_objects()}
    assert {"TrainJob", "TrainingRuntime", "ElasticJob", "RoleBinding"} <= kinds, kinds


def test_the_source_scan_finds_the_calls():
    used = calls_in_source()
    assert len(used) >= 10 and ("", "pods", "watch") in used and ("", "namespaces", "delete") in used, used


def test_every_call_of_the_harness_is_granted():
    rules = granted()
    needed = dict(calls_in_source())
    for obj in applied_objects():  # server-side apply: patch, and create when the object is new
        resource = KNOWN_RESOURCES[(obj["apiVersion"], obj["kind"])]
        for verb in ("get", "create", "patch", "delete"):  # add-ons are looked up, created, removed
            needed.setdefault((group_of(resource), resource.plural, verb), []).append(obj["kind"])
    for launcher in LAUNCHERS.values():  # the owners are read after a failure and deleted at teardown
        for verb in ("get", "delete", "list", "watch"):
            needed.setdefault((group_of(launcher.owner), launcher.owner.plural, verb), []).append(launcher.name)
    needed.setdefault(("", f"{POD.plural}/log", "get"), []).append("harness/cluster/logs.py (capture)")
    missing = {key: where[:3] for key, where in needed.items() if key not in rules}
    assert not missing, f"manifests/rbac.yaml lacks {missing}"


@pytest.mark.parametrize(("group", "resource", "verbs"), [
    ("apps", "daemonsets", ("create", "delete", "get", "list", "watch")),
    ("batch", "jobs", ("create", "delete")),
    ("kubeflow.org", "mpijobs", ("create", "delete")),
    ("", "namespaces", ("create", "delete")),
    ("", "pods/log", ("get",)),
    ("trainer.kubeflow.org", "trainjobs", ("create", "delete", "get", "list", "watch")),
    ("trainer.kubeflow.org", "clustertrainingruntimes", ("get", "list")),
    ("jobset.x-k8s.io", "jobsets", ("get", "list", "watch")),
])
def test_what_each_test_needs_is_granted(group, resource, verbs):
    rules = granted()
    assert all((group, resource, verb) in rules for verb in verbs)


def addon_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) manifests/rbac-addons.yaml's Role grants (in kube-system)."""
    (role,) = [o for o in rbac_objects("ns", {}, RBAC_ADDONS) if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "kube-system"
    return {(group, name, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for name in rule["resources"] for verb in rule["verbs"]}


def test_the_addon_rights_cover_the_addons_and_gpu_sharing_in_kube_system():
    from harness.setup.addons import ADDON_NAMESPACE, ADDON_RIGHTS
    from harness.setup.gpu_sharing import MPS, reset_job, sharing_objects

    objects = [*addon_objects(NVIDIA_DEVICE_PLUGIN, "r"), *addon_objects(EFA_DEVICE_PLUGIN, "r"),
               *sharing_objects(MPS, 4, "r", (), {}), reset_job("n1", "r", "img", (), {})]
    rules = addon_rules()
    verb, group, resource = ADDON_RIGHTS
    assert (group, resource, verb) in rules
    for obj in objects:
        assert obj["metadata"]["namespace"] == ADDON_NAMESPACE, obj["metadata"]
        kind = KNOWN_RESOURCES[(obj["apiVersion"], obj["kind"])]
        for verb in ("get", "create", "patch", "delete"):
            assert (group_of(kind), kind.plural, verb) in rules, (obj["kind"], verb)


def test_run_only_grants_no_configmaps_and_no_pod_creation():
    # The sharing ConfigMap is the add-on file's; pods are made by the Job, DaemonSet and operators'
    # controllers, never by the harness.
    rules = granted()
    assert not {(g, r, v) for g, r, v in rules if r == "configmaps"}
    assert ("", "pods", "create") not in rules and ("", "pods", "delete") in rules


def test_the_policy_checks_what_the_addon_file_grants():
    from harness.setup.addons import ADDON_NAMESPACE, ADDON_RIGHTS

    objects = [doc for doc in yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text()) if doc]
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    verb, group, resource = ADDON_RIGHTS
    check = f"authorizer.group('{group}').resource('{resource}').namespace('{ADDON_NAMESPACE}').check('{verb}')"
    assert any(check in v["expression"] for v in policy["spec"]["variables"])


RISKY_RESOURCES = {"secrets", "clusterroles", "clusterrolebindings", "roles", "rolebindings",
                   "customresourcedefinitions", "*"}
RISKY_VERBS = {"*", "escalate", "bind", "impersonate"}
# The DLRover launcher's RoleBinding for its job's master (manifests/rbac.yaml says why): making
# RoleBindings, and `bind` on the master's ClusterRole alone.
DLROVER_BINDING = {("rbac.authorization.k8s.io", "rolebindings", verb) for verb in ("get", "create", "patch", "delete")}
DLROVER_BIND = {("rbac.authorization.k8s.io", "clusterroles", verb) for verb in ("get", "bind")}


def test_nothing_that_escalates_is_granted():
    rules = granted() | addon_rules()
    risky = {(g, r, v) for g, r, v in rules if r in RISKY_RESOURCES or v in RISKY_VERBS}
    assert risky == DLROVER_BINDING | DLROVER_BIND, risky


def test_bind_is_granted_on_the_dlrover_masters_role_alone():
    from harness.jobs.launchers.dlrover import MASTER_CLUSTER_ROLE

    (bind,) = [rule for rule in cluster_role("kubetest2-training")["rules"] if "bind" in rule["verbs"]]
    assert bind["verbs"] == ["get", "bind"] and bind["resources"] == ["clusterroles"]
    assert bind["resourceNames"] == [MASTER_CLUSTER_ROLE]
    # What the master may do: nothing that escalates, no nodes, no Secrets, no exec.
    master = rules_of(cluster_role(MASTER_CLUSTER_ROLE))
    assert not {(g, r, v) for g, r, v in master
                if r in RISKY_RESOURCES | {"nodes", "pods/exec"} or v in RISKY_VERBS}, master
    assert ("", "pods", "create") in master and ("elastic.iml.github.io", "elasticjobs", "patch") in master


def test_the_file_applies_as_shipped():
    # `kubectl apply -f manifests/rbac.yaml`: plain YAML, no template placeholder, every namespaced
    # object and the binding's subject in one namespace, default.
    text = (REPO / "manifests" / "rbac.yaml").read_text()
    assert "{{" not in text
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
                                            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    (account, _, _, binding, _, _) = objects
    assert account["metadata"]["namespace"] == "default"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": "default"}]
    assert binding["roleRef"]["name"] == objects[1]["metadata"]["name"]


def test_the_harness_sets_its_own_namespace_and_labels():
    objects = rbac_objects("ns-1", {"kubetest2-training/run-id": "r1"})
    (account, role, _, binding, _, _) = objects
    assert account["metadata"]["namespace"] == "ns-1"
    assert binding["subjects"][0]["namespace"] == "ns-1"
    for obj in objects:
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubetest2-training",
                                             "kubetest2-training/run-id": "r1"}
    assert "namespace" not in role["metadata"]


def test_each_test_declares_the_rbac_files_it_needs():
    """A test whose own code installs in kube-system (it imports harness.setup.gpu_sharing, which asks
    for the add-on rights) declares manifests/rbac-addons.yaml; every other test the run-only file
    alone; both files exist. docs/TESTS.md prints each test's declaration."""
    import inspect
    import sys

    from harness.framework.suite import ADDON_RBAC, RUN_ONLY_RBAC
    from testbins.suites import all_suites

    assert (REPO / RUN_ONLY_RBAC).is_file() and (REPO / ADDON_RBAC).is_file()
    for suite in all_suites():
        for test in suite.tests:
            modules = [m for m in {inspect.getmodule(f.func) for f in test.features} if m is not None]
            installs = any(getattr(value, "__module__", None) == "harness.setup.gpu_sharing"
                           for m in modules for value in vars(m).values())
            expected = (RUN_ONLY_RBAC, ADDON_RBAC) if installs else (RUN_ONLY_RBAC,)
            assert test.rbac == expected, (suite.binary, test.name, test.rbac)
    assert "harness.setup.gpu_sharing" in sys.modules
