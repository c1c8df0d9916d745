"""Set-up steps of a run and a test: node discovery, cluster add-ons (device plugins, mpi-operator,
Kubeflow Trainer and JobSet; operators: the one a launcher's API needs, before a test's first job),
GPU sharing and the test's namespace. The runner calls them before the tests; cleanup removes what
they left.

May import: harness.errors, harness.config, harness.cluster, harness.verdict, harness.framework.
"""
