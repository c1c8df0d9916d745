"""The local Kubernetes control plane behind `hack/local-cluster` (etcd, API server, kwok nodes)."""
