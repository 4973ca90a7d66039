"""One scheduled maintenance run against the same run before its caches (scripts/perf/components/maintenance.py).

    python scripts/bench_maintenance.py [--tables 4] [--rounds 3] [--commits 100] [--retain 65] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.maintenance import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
