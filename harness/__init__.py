"""kubetest2-training's harness: configuration, Go-test-compatible runner, cluster operations,
waiting, log capture, metric parsing and JUnit. Imports no torch (the kubetest2 image stays small)."""

__version__ = "0.1.0"
