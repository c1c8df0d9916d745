"""YAML templates of the workloads and launchers, rendered by harness.cluster.manifests (shipped as package data)."""
