"""Configuration: every setting declared once (settings), the parsers of setting values (values),
redaction of secret values, the artifacts folder the run writes to, and the node topology the
settings and the nodes resolve to (topology: the type, nodes, GPUs and EFA, each with its origin).

May import: harness.errors.
"""
