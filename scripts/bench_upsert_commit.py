"""Upsert commit work per batch against pyiceberg's copy-on-write upsert (scripts/perf/components/upsert_commit.py).

    python scripts/bench_upsert_commit.py [--rows 2000000] [--files 20] [--sizes 2000 20000]
                                          [--batches 3] [--json benchmarks/upsert_commit.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.upsert_commit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
