"""The suites' binaries (e2e-nvidia, e2e-nvidia-training, the kubetest2 tester plugin) and their
tests, one subpackage per suite (nvidia, nvidia_training): what a user runs against a cluster.
Built on the harness; the harness never imports them.

May import: harness, testbins.nvidia, testbins.nvidia_training.
"""
