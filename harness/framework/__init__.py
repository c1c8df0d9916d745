"""The Go-test framework a test binary is written against: the suite registry and test selection
(suite), the Go-test command line (cli), and the context a test runs in with what a run shares
(context). The run itself (harness.runner) stands above this package.

May import: harness.errors, harness.config, harness.cluster, harness.report, harness.verdict (a test
declares the kinds of check that judge it: harness.verdict.checks.CheckKind).
"""
