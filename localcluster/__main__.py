"""`python -m localcluster` (what hack/local-cluster runs).

May import: localcluster.cli.
"""

import sys

from localcluster.cli import main

sys.exit(main())
