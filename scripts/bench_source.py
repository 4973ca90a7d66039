"""The Kafka source against raw confluent-kafka; --tail: the reader alone (scripts/perf/components/source.py).

    python scripts/bench_source.py [--records 1000000] [--tail] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.source import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
