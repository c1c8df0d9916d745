"""`python -m localcluster` (what hack/local-cluster runs)."""

import sys

from localcluster.cli import main

sys.exit(main())
