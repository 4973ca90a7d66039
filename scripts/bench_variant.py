"""Variant encoding throughput (scripts/perf/components/variant_encode.py).

    python scripts/bench_variant.py [--records 100000] [--output benchmarks/variant_encode.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.variant_encode import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
