"""The local cluster behind `hack/local-cluster` and `hack/images`: a Kubernetes control plane
without Docker (etcd, API server, kwok), nodes that run pods as host processes or as real kubelets,
node shapes and faults to test against, and the images those nodes run. A development tool run from
the checkout, not shipped in the wheel. Its top level composes the parts: cli (the command line),
cluster (up, down, status), node_agent (the host-process nodes' kubelet).

May import: nothing of the local cluster.
"""
