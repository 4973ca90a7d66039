"""JSON decode candidates against the Avro path (scripts/perf/components/json_decode.py).

    python scripts/bench_json.py [--records 200000] [--output benchmarks/json.json]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.json_decode import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
