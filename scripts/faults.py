"""Fault drills: the reliability scenarios against a private local stack (scripts/reliability/drills.py).

    python scripts/faults.py [--only bad_input,faults,concurrent,checkpoints] [--workdir DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.reliability.drills import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
