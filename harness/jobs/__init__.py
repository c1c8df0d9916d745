"""Jobs a test runs: the launchers (how a workload is rendered onto the nodes), the job's life
(job: launch, wait, capture, teardown), its metrics (job_metrics), what a failed job's logs say
(mpirun, exit_after_training), the assessment both test binaries use (assessment.assess), and the
GPU-sharing tests' flow (gpu_sharing.share_and_assess).

May import: harness.errors, harness.config, harness.metrics, harness.cluster, harness.verdict,
harness.report, harness.framework, harness.setup.
"""
