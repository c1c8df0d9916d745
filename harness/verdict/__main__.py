"""`python -m harness.verdict`: judge a run again from its logs, offline (harness.verdict.rejudge)."""

import sys

from harness.verdict.rejudge import run

sys.exit(run(sys.argv[1:]))
