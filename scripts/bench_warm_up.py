"""The first batch after a start with and without warmed Python workers (scripts/perf/components/warm_up.py).

    python scripts/bench_warm_up.py [--pairs 3] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.warm_up import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
