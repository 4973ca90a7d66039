"""The cost of deleting expired snapshots' files in the job's commits (scripts/perf/components/expiry_cleanup.py).

    python scripts/bench_expiry_cleanup.py [--tables 4] [--commits 200] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.expiry_cleanup import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
