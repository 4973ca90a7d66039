"""Protobuf decode throughput, flat and nested, and against Avro (scripts/perf/components/protobuf.py).

    python scripts/bench_protobuf.py [--records 200000] [--json benchmarks/protobuf.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.protobuf import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
