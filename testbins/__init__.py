"""The suites' binaries (e2e-nvidia, e2e-nvidia-training, upstream's GPU node suites e2e-nvidia-<folder>,
the kubetest2 tester plugin) and their tests, one subpackage per suite (nvidia, nvidia_training;
nvidia_node for all the GPU node suites): what a user runs against a cluster.
Built on the harness; the harness never imports them.

May import: harness, testbins.nvidia, testbins.nvidia_node, testbins.nvidia_training.
"""
