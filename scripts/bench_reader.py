"""The Kafka reader against a git revision's, in one process (scripts/perf/components/reader.py).

    python scripts/bench_reader.py [--against HEAD] [--new-topics] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.reader import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
