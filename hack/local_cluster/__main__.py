"""`python -m local_cluster` (what hack/local-cluster runs)."""

import sys

from .cli import main

sys.exit(main())
