"""Write docs/TESTS.md and docs/SETTINGS.md (`--check`: exit 1 when one differs); testbins/catalogue.py does it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness and suites of this clone, not the venv's

from testbins.catalogue import main

if __name__ == "__main__":
    sys.exit(main())
