"""Table creation, ours against pyiceberg's (scripts/perf/components/create.py).

    python scripts/bench_create.py [--tables 200] [--namespaces 2] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.create import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
