"""The control plane: its components and how they are started (components, supervisor, processes),
certificates and kubeconfigs (pki, kubeconfig), the training controllers (training_controllers),
the API client every part uses (api), and waiting for a condition (waits).

May import: localcluster.base.
"""
