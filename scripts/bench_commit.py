"""One table commit, ours against pyiceberg's; --soak: many commits (scripts/perf/components/commit.py).

    python scripts/bench_commit.py [--tables 100] [--batches 10] [--soak] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.commit import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
