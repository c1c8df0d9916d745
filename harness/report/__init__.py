"""What a run leaves for people and CI: JUnit XML (junit), each test's result.json (results), and the
self-contained report.html (page, drawn by html with its charts, from what inputs reads back).
`python -m harness.report ARTIFACTS` writes the page.

May import: harness.errors, harness.config, harness.metrics, harness.cluster, harness.verdict.
"""
