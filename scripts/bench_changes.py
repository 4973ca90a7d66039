"""Changes/s of extract_changes and last_change_per_key on one core (scripts/perf/components/changes.py).

    python scripts/bench_changes.py [--changes 1000000] [--keys 200000] [--repeat 3]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.changes import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
