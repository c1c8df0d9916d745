"""Where each kind lives in the API: its group/version, plural and scope, for building paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Objects are plain dicts (JSON as the API server sends it): the client's typed models cost more
# to deserialize than everything else the harness does, and dicts serve custom resources too.
Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def collection_path(self, namespace: str | None) -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced:
            if namespace is None:
                return f"{prefix}/{self.plural}"  # across all namespaces
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def object_path(self, name: str, namespace: str | None) -> str:
        return f"{self.collection_path(namespace)}/{name}"


# The kinds the suites use; anything else is looked up through API discovery.
KNOWN_RESOURCES = {
    (r.api_version, r.kind): r
    for r in (
        Resource("v1", "Namespace", "namespaces", False),
        Resource("v1", "Node", "nodes", False),
        Resource("v1", "Pod", "pods", True),
        Resource("v1", "Service", "services", True),
        Resource("v1", "ConfigMap", "configmaps", True),
        Resource("v1", "Secret", "secrets", True),
        Resource("v1", "ServiceAccount", "serviceaccounts", True),
        Resource("v1", "Event", "events", True),
        Resource("batch/v1", "Job", "jobs", True),
        Resource("apps/v1", "DaemonSet", "daemonsets", True),
        Resource("apps/v1", "Deployment", "deployments", True),
        Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False),
        Resource("kubeflow.org/v2beta1", "MPIJob", "mpijobs", True),
        Resource("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs", True),
        Resource("trainer.kubeflow.org/v1alpha1", "TrainingRuntime", "trainingruntimes", True),
        Resource("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", False),
        Resource("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", True),
        Resource("elastic.iml.github.io/v1alpha1", "ElasticJob", "elasticjobs", True),
        Resource("rbac.authorization.k8s.io/v1", "Role", "roles", True),
        Resource("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
        Resource("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
        Resource("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
        Resource("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
        Resource("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding",
                 "validatingadmissionpolicybindings", False),
        # Dynamic Resource Allocation (GA in Kubernetes 1.34): upstream's nvidia-dra suite.
        Resource("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False),
        Resource("resource.k8s.io/v1", "DeviceClass", "deviceclasses", False),
        Resource("resource.k8s.io/v1", "ResourceClaim", "resourceclaims", True),
        Resource("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates", True),
    )
}
POD = KNOWN_RESOURCES[("v1", "Pod")]
NODE = KNOWN_RESOURCES[("v1", "Node")]
JOB = KNOWN_RESOURCES[("batch/v1", "Job")]
NAMESPACE = KNOWN_RESOURCES[("v1", "Namespace")]
EVENT = KNOWN_RESOURCES[("v1", "Event")]
MPIJOB = KNOWN_RESOURCES[("kubeflow.org/v2beta1", "MPIJob")]
TRAINJOB = KNOWN_RESOURCES[("trainer.kubeflow.org/v1alpha1", "TrainJob")]
ELASTICJOB = KNOWN_RESOURCES[("elastic.iml.github.io/v1alpha1", "ElasticJob")]
CLUSTER_ROLE = KNOWN_RESOURCES[("rbac.authorization.k8s.io/v1", "ClusterRole")]
TRAINING_RUNTIME = KNOWN_RESOURCES[("trainer.kubeflow.org/v1alpha1", "TrainingRuntime")]
CLUSTER_TRAINING_RUNTIME = KNOWN_RESOURCES[("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")]
JOBSET = KNOWN_RESOURCES[("jobset.x-k8s.io/v1alpha2", "JobSet")]
DAEMONSET = KNOWN_RESOURCES[("apps/v1", "DaemonSet")]
DEPLOYMENT = KNOWN_RESOURCES[("apps/v1", "Deployment")]
CRD = KNOWN_RESOURCES[("apiextensions.k8s.io/v1", "CustomResourceDefinition")]
RESOURCE_SLICE = KNOWN_RESOURCES[("resource.k8s.io/v1", "ResourceSlice")]
DEVICE_CLASS = KNOWN_RESOURCES[("resource.k8s.io/v1", "DeviceClass")]
RESOURCE_CLAIM = KNOWN_RESOURCES[("resource.k8s.io/v1", "ResourceClaim")]
RESOURCE_CLAIM_TEMPLATE = KNOWN_RESOURCES[("resource.k8s.io/v1", "ResourceClaimTemplate")]
