"""`python -m localcluster` (what hack/local-cluster runs): the command line, run as a module so the
subprocesses the cluster starts find the same package on the same PYTHONPATH.

May import: localcluster.cli.
"""

import sys

from localcluster.cli import main

sys.exit(main())
