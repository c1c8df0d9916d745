"""The annotations and labels the node agent reads and writes on pods (one place for their names)."""

from __future__ import annotations

ANNOTATION_PREFIX = "kubetest2-training.local/"
# Set by the agent on every pod it runs for real; kwok's stages leave such pods alone.
EXECUTED_ANNOTATION = ANNOTATION_PREFIX + "executed-by"
EXECUTED_BY = "node-agent"
# container=image pairs: which image each local process stood in for (the image is not pulled).
STANDS_IN_FOR_ANNOTATION = ANNOTATION_PREFIX + "stands-in-for-image"
# Canned pods: the log to serve (`-<container>` for one container), an injected failure, and the
# agent's signal to kwok's stages that the log files are in place.
CANNED_LOG_ANNOTATION = ANNOTATION_PREFIX + "canned-log"
FAIL_ANNOTATION = ANNOTATION_PREFIX + "fail"
# With fail=exit-code: the code the pod's containers exit with (kwok_stages.yaml; default 1).
EXIT_CODE_ANNOTATION = ANNOTATION_PREFIX + "exit-code"
LOGS_READY_ANNOTATION = ANNOTATION_PREFIX + "logs-ready"
# Why the agent served a pod canned logs instead of running it (an annotation asked for them, a
# container has no command, the pod had started before this agent saw it): without it a pod canned
# only because of a missing command carries no local-cluster annotation and reads as a real run.
CANNED_BECAUSE_ANNOTATION = ANNOTATION_PREFIX + "canned-because"
# The fraction of each period the pod's processes were stopped because its node is labelled slow
# (slow_nodes.py): injected slowness, kept once the label goes.
SLOWED_ANNOTATION = ANNOTATION_PREFIX + "slowed-by"
# The cores the pod's processes were limited to because its node is labelled with its own CPUs
# (node_cpus.py), kept once the label goes.
CPUS_ANNOTATION = ANNOTATION_PREFIX + "cpus-limited-to"
# Pods of an MPIJob (mpi-operator v2beta1): `launcher` or `worker`.
MPI_ROLE_LABEL = "training.kubeflow.org/job-role"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# A pod's index in its job: an Indexed Job's completion index (annotation, set by the Job
# controller), else an MPIJob replica's index (label, set by mpi-operator; its launcher is 0).
JOB_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
