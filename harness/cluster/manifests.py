"""Strict rendering of the YAML templates in manifests/ (`{{.Field}}` placeholders, Go style).

Ours rather than Jinja or Go's text/template: upstream's manifests use `{{.Field}}`, and the
whole grammar needed here is one placeholder inserted as JSON, strictly checked.

A placeholder naming a field that is not declared is an "unknown field" error; a declared field
without a value is a "missing field" error; both name the template. Values are inserted as JSON
(strings quoted, lists and mappings as flow collections), which is valid YAML, so a value can
never break the document's structure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from harness.cluster.labels import MANAGED_BY, MANAGED_BY_LABEL
from harness.cluster.resources import Obj
from harness.config.redaction import redact_secrets
from harness.errors import RenderError

PLACEHOLDER = re.compile(r"\{\{\s*\.(?P<field>[A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

# Every field a template uses, with what it means; upstream's names where upstream has the same
# field (WorkerReplicas, SlotsPerWorker, GPUPerNode). tests/unit/harness/cluster/test_manifests.py checks that
# every field here is used by some template.
TEMPLATE_FIELDS: dict[str, str] = {
    "JobName": "name of the job and its headless Service",
    "Namespace": "the test's namespace",
    "Labels": "labels of every object (managed-by, run id, test, job)",
    "PodAnnotations": "annotations of the workload pods",
    "Image": "the image of the workload's containers",
    "ImagePullPolicy": "their imagePullPolicy (IMAGE_PULL_POLICY: upstream's Always for a tag, IfNotPresent for a "
                       "digest)",
    "WorkerReplicas": "worker pods (= nodes)",
    "SlotsPerWorker": "processes per worker pod",
    "GPUPerNode": "GPUs requested by a pod pinned to a node",
    "Resources": "the worker container's resources (requests and limits: GPUs and EFA, or CPUs)",
    "Env": "the worker container's environment",
    "Command": "the worker container's command",
    "Args": "the worker container's arguments",
    "LauncherCommand": "the MPI launcher's command",
    "LauncherEnv": "the MPI launcher's environment (mpirun forwards it to every rank with -x)",
    "MasterPort": "the rendezvous port on worker 0",
    "BackoffLimit": "pod failures the Job (the MPI launcher's Job) tolerates",
    "ActiveDeadlineSeconds": "the Job's deadline",
    "NodeSelector": "node selector of the workload pods",
    "NodeName": "node a pod is pinned to",
    "Pods": "pods of a shared-gpu Job, all at once on its node, one GPU each (GPU sharing tests)",
    "SecurityContext": "the workload container's securityContext: in this project's images every capability "
                       "dropped but those its program needs, in others the runtime's defaults "
                       "(launchers.base.security_context)",
    "WorkerSecurityContext": "the MPI workers' securityContext: sshd's capabilities, likewise",
    "Requests": "CPU and memory a per-node pod requests (a share of the node's allocatable; none on cpu)",
    "Tolerations": "tolerations of every pod (the GPU and EFA taints, and TOLERATIONS')",
    "NodeAffinity": "the pods' nodeAffinity: the nodes discovery chose, by name (launchers.base.node_affinity)",
    "VolumeMounts": "the workload container's volume mounts (host folders, /dev/shm, checkpoints)",
    "Volumes": "the volumes behind VolumeMounts",
    "RuntimeKind": "the kind of the TrainJob's runtime: ClusterTrainingRuntime or TrainingRuntime",
    "RuntimeName": "the name of the TrainJob's runtime",
    "MaxRestarts": "restarts of the whole JobSet its failure policy allows",
    "RestartCount": "relaunches of a lost or failed worker pod a DLRover ElasticJob's master makes",
    "MasterClusterRole": "the ClusterRole a DLRover ElasticJob's master is bound to in its namespace",
}

MANIFESTS_PACKAGE = "manifests"
# The shell scripts pods run, beside the templates (checked by shellcheck: tests/unit/repo/test_scripts.py).
SCRIPTS = "scripts"


def template_text(name: str) -> str:
    """A template shipped in the manifests package."""
    try:
        return resources.files(MANIFESTS_PACKAGE).joinpath(name).read_text()
    except (FileNotFoundError, OSError):
        raise RenderError(f"render {name}: no such template in manifests/") from None


def script_text(name: str) -> str:
    """A shell script shipped in manifests/scripts/ (or a file it reads): a pod runs it as the text
    of `sh -c` or `bash -c`, so its image needs no copy of it."""
    return template_text(f"{SCRIPTS}/{name}")


def _as_yaml_value(value: Any) -> str:
    return json.dumps(value, sort_keys=False)


def render_text(name: str, text: str, fields: Mapping[str, Any]) -> str:
    unknown = sorted({m["field"] for m in PLACEHOLDER.finditer(text)} - TEMPLATE_FIELDS.keys())
    if unknown:
        raise RenderError(f"render {name}: unknown field " + ", ".join(f".{f}" for f in unknown)
                          + " (known: " + ", ".join(sorted(TEMPLATE_FIELDS)) + ")")
    undeclared = sorted(set(fields) - TEMPLATE_FIELDS.keys())
    if undeclared:
        raise RenderError(f"render {name}: unknown field " + ", ".join(f".{f}" for f in undeclared)
                          + " given")

    def substitute(match: re.Match[str]) -> str:
        field = match["field"]
        if fields.get(field) is None:
            raise RenderError(f"render {name}: missing field .{field} ({TEMPLATE_FIELDS[field]})")
        return _as_yaml_value(fields[field])

    return PLACEHOLDER.sub(substitute, text)


# yaml is imported where it is used: it is a tenth of `--help`'s time (bench/harness_costs.py startup),
# and kubetest2 asks every tester for `--help` before each run.


def dump_objects(objects: list[Obj]) -> str:
    """Objects as multi-document YAML for the artifacts, secret-looking values redacted."""
    import yaml

    return yaml.safe_dump_all([redact_secrets(obj) for obj in objects], sort_keys=False)


def save(folder: Path, name: str, objects: list[Obj]) -> None:
    """Rendered objects as the artifacts keep them: <folder>/<template name>, secrets redacted."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(dump_objects(objects))


def render(name: str, fields: Mapping[str, Any]) -> list[Obj]:
    """Render a template into objects, each carrying the managed-by label."""
    import yaml

    text = render_text(name, template_text(name), fields)
    try:
        objects = [doc for doc in yaml.safe_load_all(text) if doc]
    except yaml.YAMLError as exc:
        raise RenderError(f"render {name}: not valid YAML after rendering: {exc}") from None
    for obj in objects:
        labels = obj.get("metadata", {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            raise RenderError(f"render {name}: {obj.get('kind')} {obj.get('metadata', {}).get('name')} "
                              f"lacks the label {MANAGED_BY_LABEL}={MANAGED_BY} (use .Labels)")
    return objects


RBAC = "rbac.yaml"
# The add-on rights (kube-system), apart from the run-only ones: docs/RBAC.md.
RBAC_ADDONS = "rbac-addons.yaml"
# The ClusterRole of manifests/rbac.yaml that each DLRover ElasticJob's master is bound to in its
# job's namespace (harness.jobs.launchers.dlrover; installed by harness.setup.operators if missing).
DLROVER_MASTER_ROLE = "kubetest2-training-dlrover-master"


def rbac_objects(namespace: str, labels: Mapping[str, str], name: str = RBAC) -> list[Obj]:
    """manifests/rbac.yaml (or `name`, rbac-addons.yaml) with its ServiceAccount moved into
    `namespace`, `labels` added to every object.

    The file is plain YAML so that `kubectl apply -f` takes it as shipped (its ServiceAccount in
    `default`); a run that applies it elsewhere sets the namespace here, in code, both on the
    ServiceAccount and on the binding's subject, which `kubectl apply -n` would leave behind."""
    objects = render(name, {})
    for obj in objects:
        metadata = obj["metadata"]
        metadata["labels"] = {**metadata.get("labels", {}), **labels}
        if obj["kind"] == "ServiceAccount":
            metadata["namespace"] = namespace
        for subject in obj.get("subjects", []):
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
    return objects
