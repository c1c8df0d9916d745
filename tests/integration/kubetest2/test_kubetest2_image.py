"""The kubetest2 image (Dockerfile.kubetest2, built by hack/images as shipped) runs the suite from inside
the cluster, as upstream CI runs it: a Job on a real node (kubelet + containerd) runs `kubetest2 noop
--test=exec -- e2e-nvidia-training ...` with the in-cluster credentials of a ServiceAccount bound by
manifests/rbac.yaml alone; its JUnit is copied out through exec and read.

The training it starts runs on the kwok CPU nodes beside the real ones (their pods are host processes
of the node agent, `execution=real`): what is under test here is the kubetest2 image, its binaries,
the in-cluster configuration and the RBAC, so it needs only that image (134 MB, built in about 6 min
here), not the 4.9 GB workloads image of test_real_node_workloads.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from ..conftest import LocalCluster, exec_in, image_on_real_nodes, real_node_names, wait_for
from ..kubetest2_runs import apply_rbac, remove_cluster_rbac

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

# kubetest2's noop deployer hands the tester a kubeconfig path; the Job writes one holding the
# ServiceAccount's in-cluster credentials (its token and CA, the `kubernetes` Service's address). The
# script waits for the JUnit to be copied out before it exits (a finished pod cannot be exec'd into).
SCRIPT = (Path(__file__).parent / "kubetest2-job-as-service-account.sh").read_text()


def test_the_kubetest2_image_runs_the_suite_as_a_job_with_the_rbac_service_account(real_nodes: LocalCluster,
                                                                                   namespace: str):
    kubetest2_image = image_on_real_nodes("kubetest2")
    # manifests/rbac.yaml alone (run-only: its ClusterRole, binding and admission policy), as shipped.
    kube, objects = apply_rbac(real_nodes, namespace, addons=False)
    env = {"ACCELERATOR": "cpu", "WORKLOAD_SIZE": "tiny", "IMAGE_PULL_POLICY": "IfNotPresent",
           # The trainings share the machine's two cores with this Job and each other: a node's probe
           # is slower by that, not a straggler.
           "STRAGGLER_FRACTION": "0.05"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kubetest2"},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": "kubetest2"}}, "spec": {
               "serviceAccountName": "kubetest2-training", "restartPolicy": "Never",
               "nodeSelector": {"node.kubernetes.io/instance-type": "container-cpu"},
               "containers": [{"name": "kubetest2", "image": kubetest2_image, "imagePullPolicy": "IfNotPresent",
                               "command": ["bash", "-c", SCRIPT],
                               "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}}
    try:
        real_nodes.batch.create_namespaced_job(namespace, job)

        def run_done() -> client.V1Pod | None:
            pods = real_nodes.core.list_namespaced_pod(namespace, label_selector="app=kubetest2").items
            if pods and pods[0].status.phase == "Failed":
                raise AssertionError(f"the kubetest2 pod failed: {pods[0].status}")
            if not pods or pods[0].status.phase != "Running":
                return None
            return pods[0] if exec_in(real_nodes, pods[0], "cat /logs/exit-code 2>/dev/null").strip() else None

        pod = wait_for(run_done, 900, "the kubetest2 Job to finish its run", interval_s=5)
        # Copied out as `kubectl cp` does: through exec, from the finished run's artifacts.
        junit = exec_in(real_nodes, pod, "cat /logs/artifacts/junit_e2e-nvidia-training.xml")
        exit_code = exec_in(real_nodes, pod, "cat /logs/exit-code").strip()
        exec_in(real_nodes, pod, "touch /logs/copied")
        assert exit_code == "0", junit
        assert 'name="TestMNISTTraining"' in junit and "<failure" not in junit, junit
        assert pod.spec.node_name in real_node_names(real_nodes)
        assert pod.status.container_statuses[0].container_id.startswith("containerd://")
    finally:
        remove_cluster_rbac(kube, objects)
