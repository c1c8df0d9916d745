"""A TrainJob on the real nodes (kubelet + containerd, CoreDNS, kube-proxy): Kubeflow Trainer and
JobSet as `hack/local-cluster up` runs them make its JobSet, whose two pods land on the two real
nodes, get the torch plugin's PET_* environment, and meet at PET_MASTER_ADDR:PET_MASTER_PORT, the
JobSet's headless-service name resolved by the cluster's CoreDNS, across the nodes' network.

The pods run python3 in the kubetest2 image (134 MB, hack/images) rather than torchrun in the 4.9 GB
workloads image: a TCP rendezvous stands in for torchrun's, which is what a real cluster's first
TrainJob needs of the network and DNS. Training itself as a TrainJob is test_trainjob_launcher.py's
(host-process nodes) and, with the workloads image, the `images` tests'.
"""

from __future__ import annotations

import pytest

from ..conftest import LocalCluster, image_on_real_nodes, real_node_names, wait_for
from ..local_cluster.test_trainjob_controllers import (
    TRAINER,
    condition,
    conditions,
    create_trainjob,
    get,
    pods_of,
    torch_runtime,  # noqa: F401 (a fixture)
    trainjob,
)

pytestmark = [pytest.mark.integration, pytest.mark.real_nodes]

# Rank 0 listens on PET_MASTER_PORT; rank 1 resolves PET_MASTER_ADDR (a pod of the JobSet's headless
# service) and connects, retrying while DNS and the listener come up, as torchrun's rendezvous does.
RENDEZVOUS = r"""
import os, socket, time
rank, master, port = int(os.environ["PET_NODE_RANK"]), os.environ["PET_MASTER_ADDR"], int(os.environ["PET_MASTER_PORT"])
print(f"rank {rank} of {os.environ['PET_NNODES']} on {socket.gethostname()}, master {master}:{port}", flush=True)
if rank == 0:
    server = socket.create_server(("", port))
    server.settimeout(120)
    conn, _ = server.accept()
    print("rank 0 heard:", conn.recv(100).decode(), flush=True)
else:
    deadline = time.monotonic() + 120
    while True:
        try:
            with socket.create_connection((master, port), timeout=5) as peer:
                peer.sendall(f"hello from rank {rank} at {socket.gethostbyname(master)}".encode())
            break
        except OSError as error:
            if time.monotonic() > deadline:
                raise
            print(f"rank {rank}: {master}:{port} not yet ({error})", flush=True)
            time.sleep(1)
    print(f"rank {rank} reached the master", flush=True)
"""


def test_a_trainjobs_pods_meet_across_the_real_nodes_by_its_headless_service(
        real_nodes: LocalCluster, namespace: str, torch_runtime: str):  # noqa: F811
    image = image_on_real_nodes("kubetest2")
    name = "tjreal"
    create_trainjob(real_nodes, trainjob(name, namespace, ["python3", "-c", RENDEZVOUS], [], image=image,
                                         node_type="container-cpu"))
    done = wait_for(lambda: condition(get(real_nodes, TRAINER, "trainjobs", namespace, name), "Complete")
                    or condition(get(real_nodes, TRAINER, "trainjobs", namespace, name), "Failed"),
                    240, "the TrainJob to end")
    pods = {p.spec.hostname: p for p in pods_of(real_nodes, namespace, name)}
    logs = {host: real_nodes.core.read_namespaced_pod_log(p.metadata.name, namespace) for host, p in pods.items()}
    assert done["type"] == "Complete", (conditions(get(real_nodes, TRAINER, "trainjobs", namespace, name)), logs)
    assert {p.spec.node_name for p in pods.values()} == set(real_node_names(real_nodes)), pods
    assert all(p.status.container_statuses[0].container_id.startswith("containerd://") for p in pods.values())
    master = f"{name}-node-0-0"
    assert f"rank 0 of 2 on {master}, master {master}.{name}:29500" in logs[master], logs
    assert "rank 0 heard: hello from rank 1 at 10.245." in logs[master], logs  # a pod address on a real node
    assert "rank 1 reached the master" in logs[f"{name}-node-0-1"], logs
