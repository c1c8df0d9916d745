"""Write (`--check`: compare) localcluster/emulation/canned_logs; workloads/canned_gpu_logs.py does it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the workloads of this clone, not the venv's

from workloads.canned_gpu_logs import main

if __name__ == "__main__":
    sys.exit(main(out=Path(__file__).resolve().parents[1] / "localcluster" / "emulation" / "canned_logs"))
