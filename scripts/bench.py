"""icerouter at scale: the live job's modes (scripts/perf/live/).

    python scripts/bench.py [--mode throughput|scale|freshness|soak|commit-scaling|upsert] ... (--help)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.live.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
