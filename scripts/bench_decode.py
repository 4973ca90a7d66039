"""Decode throughput against confluent-kafka's AvroDeserializer (scripts/perf/components/decode.py).

    python scripts/bench_decode.py [--records 1000000] [--schemas 1]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.decode import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
