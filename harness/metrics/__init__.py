"""Metrics: what workload logs say. One line in each format the harness reads (log_lines), and
every rank's metric records of a run's logs (records). Pure: files in, records out, no cluster,
no verdict. `python -m harness.metrics FILE...` prints the records as JSON.

May import: harness.errors.
"""
