"""kubetest2-training's harness, laid out by role (docs/DEVELOPING.md: Layout). From the ground up:
config (settings), metrics (what logs say), cluster (the client, waiting, log capture), verdict
(checks), report (JUnit, result.json, report.html), framework (suite, test context), setup
(discovery, add-ons, namespaces), jobs (launchers, the job, its assessment); then runner.py, the
run, and cleanup.py; errors.py is shared by all. Each package says what it may import, and
tests/unit/repo/test_layout.py keeps it so. Imports no torch (the kubetest2 image stays small).

May import: nothing of the harness.
"""

__version__ = "0.1.0"
