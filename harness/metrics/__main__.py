"""`python -m harness.metrics FILE...`: the metrics of workload logs, as JSON (harness.metrics.records)."""

import sys

from harness.metrics.records import main

sys.exit(main())
