"""`python -m harness.report ARTIFACTS`: the run's report.html (harness.report.page)."""

import sys

from harness.report.page import main

sys.exit(main())
