"""Verdicts: named checks that fail closed (checks), the training verdict (training), stragglers,
bus bandwidth, node capacity, the node-type thresholds (thresholds.yaml), and the offline
re-judge (`python -m harness.verdict`, rejudge). Judges metrics; never touches the cluster.

May import: harness.errors, harness.config, harness.metrics.
"""
