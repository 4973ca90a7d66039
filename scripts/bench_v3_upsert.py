"""Upsert commits and reads of a format v3 table (deletion vectors) against v2 (scripts/perf/components/v3_upsert.py).

    python scripts/bench_v3_upsert.py [--rows 2000000] [--files 20] [--size 2000] [--batches 5]
                                      [--read-batches 95] [--json benchmarks/v3_upsert.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.v3_upsert import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
