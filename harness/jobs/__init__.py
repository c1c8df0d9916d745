"""Jobs a test runs: the launchers (how a workload is rendered onto the nodes), the job's life
(job: launch, wait, capture, teardown), its metrics (job_metrics), what a failed job's logs say
(mpirun, exit_after_training), and the assessment both test binaries use (assessment.assess).

May import: harness.errors, harness.config, harness.metrics, harness.cluster, harness.verdict,
harness.report, harness.framework, harness.setup.
"""
