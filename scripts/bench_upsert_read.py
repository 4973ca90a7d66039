"""Read time of an upsert table after 100 change batches, against it compacted (scripts/perf/components/upsert_read.py).

    python scripts/bench_upsert_read.py [--rows 2000000] [--files 20] [--batches 100]
                                        [--batch-keys 2000 10000] [--runs 3] [--format-versions 2 3]
                                        [--json benchmarks/upsert_read.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.upsert_read import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
