"""YAML templates of the workloads and launchers, rendered by harness.manifests (shipped as package data)."""
