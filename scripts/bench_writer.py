"""Data-file writer cost per file, ours against pyiceberg's (scripts/perf/components/writer.py).

    python scripts/bench_writer.py [--tables 200] [--rows 2000 20000] [--json-file FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.writer import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
